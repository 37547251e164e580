// deform_conv: schema, argument checks shared by all devices, the chunked
// GEMM driver shared by the CPU and CUDA host layers, CPU registration.
//
// One op serves DCNv1 (mask = None) and DCNv2. Per chunk of images:
//   forward:  columns = im2col(input, offset, mask)          [C*KK, B*OH*OW]
//             out     = W_g @ columns_g (+ bias, fused in addmm), per group
//   backward: grad_columns = W_g^T @ grad_out_g
//             col2im(grad_columns) -> grad_input, grad_offset, grad_mask,
//               and, in place of each grad_columns element it consumed, the
//               column value (col2im loads the same corners im2col would)
//             grad_W_g += grad_out_g @ columns_g^T
// A whole chunk goes through one GEMM per group (N = B * OH * OW columns):
// fewer, larger GEMMs than a per-image loop.
#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include "common/checks.h"
#include "common/reduced_float.h"
#include "deform_conv.h"

namespace visdet_ops {
namespace {

constexpr const char* kOp = "deform_conv2d";

// Without an explicit im2col_step, chunks are as large as a column buffer of
// this many elements allows (512 MiB in float32), at least one image.
constexpr int64_t kMaxAutoColumnElements = int64_t{1} << 27;

void check_params(const DeformConvParams& p) {
  TORCH_CHECK(p.stride_h > 0 && p.stride_w > 0, kOp,
              ": stride must be positive, got (", p.stride_h, ", ", p.stride_w,
              ")");
  TORCH_CHECK(p.pad_h >= 0 && p.pad_w >= 0, kOp,
              ": padding must be non-negative, got (", p.pad_h, ", ", p.pad_w,
              ")");
  TORCH_CHECK(p.dilation_h > 0 && p.dilation_w > 0, kOp,
              ": dilation must be positive, got (", p.dilation_h, ", ",
              p.dilation_w, ")");
  TORCH_CHECK(p.groups > 0, kOp, ": groups must be positive, got ", p.groups);
  TORCH_CHECK(p.deform_groups > 0, kOp,
              ": deform_groups must be positive, got ", p.deform_groups);
  using namespace int_bounds;
  check_int_range(p.stride_h, 1, kMaxStride, kOp, "stride_h");
  check_int_range(p.stride_w, 1, kMaxStride, kOp, "stride_w");
  check_int_range(p.pad_h, 0, kMaxPadding, kOp, "pad_h");
  check_int_range(p.pad_w, 0, kMaxPadding, kOp, "pad_w");
  check_int_range(p.dilation_h, 1, kMaxDilation, kOp, "dilation_h");
  check_int_range(p.dilation_w, 1, kMaxDilation, kOp, "dilation_w");
  check_int_range(p.groups, 1, kMaxGroups, kOp, "groups");
  check_int_range(p.deform_groups, 1, kMaxGroups, kOp, "deform_groups");
  // im2col_step needs no bound: <= 0 picks the chunk size, and a step
  // above the batch size is the whole batch.
}

void check_tensor(const at::Tensor& input, const at::Tensor& t,
                  const char* name) {
  check_same_dtype(input, t, kOp, "input", name);
  check_same_device(input, t, kOp, "input", name);
}

}  // namespace

DeformConvArgs deform_conv_prepare(const at::Tensor& input,
                                   const at::Tensor& offset,
                                   const std::optional<at::Tensor>& mask,
                                   const at::Tensor& weight,
                                   const std::optional<at::Tensor>& bias,
                                   const DeformConvParams& p) {
  check_dim(input, 4, kOp, "input");
  check_floating(input, kOp, "input");
  check_dim(weight, 4, kOp, "weight");
  check_dim(offset, 4, kOp, "offset");
  check_tensor(input, weight, "weight");
  check_tensor(input, offset, "offset");
  check_params(p);
  const int64_t n = input.size(0), c = input.size(1), h = input.size(2),
                w = input.size(3);
  const int64_t out_channels = weight.size(0);
  const int64_t kh = weight.size(2), kw = weight.size(3);
  TORCH_CHECK(kh > 0 && kw > 0, kOp,
              ": weight must have a non-empty kernel, got shape ",
              weight.sizes());
  TORCH_CHECK(weight.size(1) * p.groups == c, kOp, ": input has ", c,
              " channels but weight of shape ", weight.sizes(), " with groups=",
              p.groups, " expects ", weight.size(1) * p.groups);
  TORCH_CHECK(out_channels % p.groups == 0, kOp, ": weight.size(0) (",
              out_channels, ") must be divisible by groups (", p.groups, ")");
  TORCH_CHECK(c % p.deform_groups == 0, kOp, ": input channels (", c,
              ") must be divisible by deform_groups (", p.deform_groups, ")");
  const int64_t out_h =
      (h + 2 * p.pad_h - (p.dilation_h * (kh - 1) + 1)) / p.stride_h + 1;
  const int64_t out_w =
      (w + 2 * p.pad_w - (p.dilation_w * (kw - 1) + 1)) / p.stride_w + 1;
  TORCH_CHECK(out_h > 0 && out_w > 0, kOp, ": input of shape ", input.sizes(),
              " is too small for a ", kh, "x", kw, " kernel with padding (",
              p.pad_h, ", ", p.pad_w, ") and dilation (", p.dilation_h, ", ",
              p.dilation_w, "): the output would be ", out_h, "x", out_w);
  const int64_t kk = kh * kw;
  checked_numel({n, out_channels, out_h, out_w}, kOp,
                "the output [N, C_out, out_h, out_w]");
  checked_numel({c, kk, n, out_h, out_w}, kOp,
                "the column buffer [C * kh * kw, N * out_h * out_w]");
  TORCH_CHECK(offset.size(0) == n && offset.size(1) == 2 * p.deform_groups * kk &&
                  offset.size(2) == out_h && offset.size(3) == out_w,
              kOp, ": offset must have shape [N, 2 * deform_groups * kh * kw, "
              "out_h, out_w] = [", n, ", ", 2 * p.deform_groups * kk, ", ",
              out_h, ", ", out_w, "], got ", offset.sizes());
  DeformConvArgs a;
  if (mask.has_value()) {
    const at::Tensor& m = *mask;
    check_dim(m, 4, kOp, "mask");
    check_tensor(input, m, "mask");
    TORCH_CHECK(m.size(0) == n && m.size(1) == p.deform_groups * kk &&
                    m.size(2) == out_h && m.size(3) == out_w,
                kOp, ": mask must have shape [N, deform_groups * kh * kw, "
                "out_h, out_w] = [", n, ", ", p.deform_groups * kk, ", ", out_h,
                ", ", out_w, "], got ", m.sizes());
    a.mask = m.contiguous();
  }
  if (bias.has_value()) {
    const at::Tensor& b = *bias;
    check_dim(b, 1, kOp, "bias");
    check_tensor(input, b, "bias");
    TORCH_CHECK(b.size(0) == out_channels, kOp,
                ": bias must have shape [out_channels] = [", out_channels,
                "], got ", b.sizes());
    a.bias = b.contiguous();
  }
  a.shape = DeformConvShape{n,        c,          h,          w,
                            out_h,    out_w,      kh,         kw,
                            p.stride_h, p.stride_w, p.pad_h,  p.pad_w,
                            p.dilation_h, p.dilation_w, p.deform_groups};
  a.params = p;
  a.out_channels = out_channels;
  a.input = input.contiguous();
  a.offset = offset.contiguous();
  a.weight = weight.contiguous();
  return a;
}

namespace {

int64_t chunk_size(const DeformConvArgs& a) {
  const DeformConvShape& s = a.shape;
  if (a.params.im2col_step > 0) return std::min(a.params.im2col_step, s.batch);
  const int64_t per_image = s.channels * s.kernel_points() * s.out_plane();
  const int64_t fit = per_image > 0 ? kMaxAutoColumnElements / per_image : s.batch;
  return std::max<int64_t>(1, std::min(fit, s.batch));
}

at::Tensor narrow_or_undefined(const at::Tensor& t, int64_t start,
                               int64_t length) {
  return t.defined() ? t.narrow(0, start, length) : t;
}

}  // namespace

at::Tensor deform_conv_forward_impl(const DeformConvArgs& a,
                                    const DeformConvKernels& kernels) {
  // This op's own GEMMs and sums: a backward run inside torch.autocast
  // (loss.backward() in the autocast region) must not have them recast.
  const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  const DeformConvShape& s = a.shape;
  const int64_t n = s.batch, cout = a.out_channels, plane = s.out_plane();
  at::Tensor output = at::empty({n, cout, s.out_h, s.out_w}, a.input.options());
  if (output.numel() == 0) return output;
  const int64_t groups = a.params.groups;
  const int64_t rows = s.channels * s.kernel_points();
  if (rows == 0) {  // no input channels: the output is the bias
    if (a.bias.defined()) {
      output.copy_(a.bias.view({1, cout, 1, 1}).expand_as(output));
    } else {
      output.zero_();
    }
    return output;
  }
  const int64_t rows_g = rows / groups, cout_g = cout / groups;
  const int64_t step = chunk_size(a);
  at::Tensor buffer = at::empty({rows * step * plane}, a.input.options());
  // One GEMM per group over the whole chunk, [cout_g, B * OH * OW], then one
  // copy into NCHW order (none for a single image). A batched GEMM writing
  // NCHW directly (a GEMM per image) measured 258 vs 201 us at 512 ch 16x16
  // batch 8 on the H100: cuBLAS picks a smaller tile for the per-image
  // shape; the copy costs ~5 us.
  at::Tensor out_buffer;
  if (step > 1) out_buffer = at::empty({cout * step * plane}, a.input.options());
  const at::Tensor w = a.weight.view({cout, rows_g});
  for (int64_t n0 = 0; n0 < n; n0 += step) {
    const int64_t b = std::min(step, n - n0);
    DeformConvShape cs = s;
    cs.batch = b;
    at::Tensor columns = buffer.narrow(0, 0, rows * b * plane).view({rows, b * plane});
    kernels.im2col(a.input.narrow(0, n0, b), a.offset.narrow(0, n0, b),
                   narrow_or_undefined(a.mask, n0, b), cs, columns);
    at::Tensor out_t = b == 1 ? output.select(0, n0).view({cout, plane})
                              : out_buffer.narrow(0, 0, cout * b * plane).view({cout, b * plane});
    for (int64_t g = 0; g < groups; ++g) {
      at::Tensor og = out_t.narrow(0, g * cout_g, cout_g);
      const at::Tensor wg = w.narrow(0, g * cout_g, cout_g);
      const at::Tensor cg = columns.narrow(0, g * rows_g, rows_g);
      if (a.bias.defined()) {
        at::addmm_out(og, a.bias.narrow(0, g * cout_g, cout_g).view({cout_g, 1}).expand({cout_g, b * plane}),
                      wg, cg);
      } else {
        at::mm_out(og, wg, cg);
      }
    }
    if (b > 1) {
      output.narrow(0, n0, b).view({b, cout, plane}).copy_(out_t.view({cout, b, plane}).transpose(0, 1));
    }
  }
  return output;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
deform_conv_backward_impl(const at::Tensor& grad_output_in,
                          const DeformConvArgs& a,
                          const DeformConvKernels& kernels) {
  // This op's own GEMMs and sums: a backward run inside torch.autocast
  // (loss.backward() in the autocast region) must not have them recast.
  const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  const DeformConvShape& s = a.shape;
  const int64_t n = s.batch, cout = a.out_channels, plane = s.out_plane();
  check_dim(grad_output_in, 4, kOp, "grad_output");
  check_same_dtype(a.input, grad_output_in, kOp, "input", "grad_output");
  check_same_device(a.input, grad_output_in, kOp, "input", "grad_output");
  TORCH_CHECK(grad_output_in.size(0) == n && grad_output_in.size(1) == cout &&
                  grad_output_in.size(2) == s.out_h &&
                  grad_output_in.size(3) == s.out_w,
              kOp, ": grad_output must have shape [", n, ", ", cout, ", ",
              s.out_h, ", ", s.out_w, "], got ", grad_output_in.sizes());
  const at::Tensor grad_output = grad_output_in.contiguous();
  const at::ScalarType dtype = a.input.scalar_type();
  const at::ScalarType acc = at::toOpMathType(dtype);
  const at::TensorOptions acc_options = a.input.options().dtype(acc);

  const int64_t groups = a.params.groups;
  const int64_t rows = s.channels * s.kernel_points();
  // With work to do, every element of grad_offset, grad_mask and grad_weight is written below
  // (col2im writes each offset/mask gradient once, the first chunk's GEMM sets grad_weight):
  // no zero fill for them. grad_input is accumulated (atomics) and starts at zero.
  const bool any = n > 0 && cout > 0 && rows > 0;
  const auto alloc = [any](at::IntArrayRef sizes, const at::TensorOptions& options) {
    return any ? at::empty(sizes, options) : at::zeros(sizes, options);
  };
  at::Tensor grad_input = at::zeros(a.input.sizes(), acc_options);
  at::Tensor grad_offset = alloc(a.offset.sizes(), a.offset.options());
  at::Tensor grad_mask =
      a.mask.defined() ? alloc(a.mask.sizes(), a.mask.options()) : at::empty({0}, a.input.options());
  at::Tensor grad_weight = alloc(a.weight.sizes(), acc_options);
  at::Tensor grad_bias =
      a.bias.defined()
          ? at::sum(grad_output, {0, 2, 3}, false, acc).to(dtype)
          : at::empty({0}, a.input.options());

  if (any) {
    const int64_t rows_g = rows / groups, cout_g = cout / groups;
    const int64_t step = chunk_size(a);
    at::Tensor buffer = at::empty({rows * step * plane}, a.input.options());
    at::Tensor grad_out_buffer;
    if (step > 1) grad_out_buffer = at::empty({cout * step * plane}, a.input.options());
    const at::Tensor w = a.weight.view({cout, rows_g});
    const at::Tensor gw = grad_weight.view({cout, rows_g});
    const int64_t offset_channels = 2 * s.deform_groups * s.kernel_points();
    const int64_t mask_channels = s.deform_groups * s.kernel_points();
    for (int64_t n0 = 0; n0 < n; n0 += step) {
      const int64_t b = std::min(step, n - n0);
      DeformConvShape cs = s;
      cs.batch = b;
      at::Tensor go_t;
      if (b == 1) {
        go_t = grad_output.select(0, n0).view({cout, plane});
      } else {
        at::Tensor t = grad_out_buffer.narrow(0, 0, cout * b * plane).view({cout, b, plane});
        t.copy_(grad_output.narrow(0, n0, b).view({b, cout, plane}).transpose(0, 1));
        go_t = t.view({cout, b * plane});
      }
      const at::Tensor input = a.input.narrow(0, n0, b);
      const at::Tensor offset = a.offset.narrow(0, n0, b);
      const at::Tensor mask = narrow_or_undefined(a.mask, n0, b);
      at::Tensor columns = buffer.narrow(0, 0, rows * b * plane).view({rows, b * plane});
      // grad_columns, which col2im turns into the columns in place.
      for (int64_t g = 0; g < groups; ++g) {
        at::Tensor cg = columns.narrow(0, g * rows_g, rows_g);
        at::mm_out(cg, w.narrow(0, g * cout_g, cout_g).t(),
                   go_t.narrow(0, g * cout_g, cout_g));
      }
      const int64_t slices = kernels.channel_slices(cs);
      // One channel slice in the dtype of the result: col2im writes grad_offset/grad_mask
      // (contiguous, allocated above) directly; else per-slice float parts, summed.
      const bool direct = slices == 1 && acc == dtype;
      at::Tensor part_offset =
          direct ? grad_offset.narrow(0, n0, b).view({1, b, offset_channels, plane})
                 : at::empty({slices, b, offset_channels, plane}, acc_options);
      at::Tensor part_mask;
      if (mask.defined()) {
        part_mask = direct ? grad_mask.narrow(0, n0, b).view({1, b, mask_channels, plane})
                           : at::empty({slices, b, mask_channels, plane}, acc_options);
      }
      at::Tensor gi = grad_input.narrow(0, n0, b);
      kernels.col2im(input, offset, mask, columns, cs, slices, gi, part_offset, part_mask);
      if (!direct) {
        grad_offset.narrow(0, n0, b).copy_(
            (slices == 1 ? part_offset.select(0, 0) : part_offset.sum(0)).view(offset.sizes()));
        if (mask.defined()) {
          grad_mask.narrow(0, n0, b).copy_(
              (slices == 1 ? part_mask.select(0, 0) : part_mask.sum(0)).view(mask.sizes()));
        }
      }
      for (int64_t g = 0; g < groups; ++g) {
        at::Tensor gwg = gw.narrow(0, g * cout_g, cout_g);
        const at::Tensor og = go_t.narrow(0, g * cout_g, cout_g);
        const at::Tensor cg = columns.narrow(0, g * rows_g, rows_g).t();
        if (acc == dtype) {
          if (n0 == 0) {
            at::mm_out(gwg, og, cg);
          } else {
            gwg.addmm_(og, cg);
          }
        } else if (n0 == 0) {  // 16-bit GEMM (float accumulation inside), summed in float
          gwg.copy_(at::mm(og, cg));
        } else {
          gwg.add_(at::mm(og, cg));
        }
      }
    }
  }
  return {grad_input.to(dtype, false, false, at::MemoryFormat::Contiguous), grad_offset, grad_mask, grad_weight.to(dtype),
          grad_bias};
}

namespace {

DeformConvKernels cpu_kernels() {
  DeformConvKernels k;
  k.im2col = [](const at::Tensor& input, const at::Tensor& offset,
                const at::Tensor& mask, const DeformConvShape& s,
                at::Tensor& columns) {
    AT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "deform_conv_im2col_cpu", [&] {
      const scalar_t* in = input.const_data_ptr<scalar_t>();
      const scalar_t* off = offset.const_data_ptr<scalar_t>();
      const scalar_t* m = mask.defined() ? mask.const_data_ptr<scalar_t>() : nullptr;
      scalar_t* cols = columns.mutable_data_ptr<scalar_t>();
      const int64_t grain = std::max<int64_t>(1, 4096 / std::max<int64_t>(1, s.channels_per_group()));
      at::parallel_for(0, s.samples(), grain, [&](int64_t begin, int64_t end) {
        deform_conv_im2col_cpu<scalar_t>(in, off, m, s, begin, end, cols);
      });
    });
  };
  k.channel_slices = [](const DeformConvShape&) -> int64_t { return 1; };
  k.col2im = [](const at::Tensor& input, const at::Tensor& offset,
                const at::Tensor& mask, at::Tensor& columns,
                const DeformConvShape& s, int64_t /*slices*/,
                at::Tensor& grad_input, at::Tensor& grad_offset,
                at::Tensor& grad_mask) {
    AT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "deform_conv_col2im_cpu", [&] {
      const scalar_t* in = input.const_data_ptr<scalar_t>();
      const scalar_t* off = offset.const_data_ptr<scalar_t>();
      const scalar_t* m = mask.defined() ? mask.const_data_ptr<scalar_t>() : nullptr;
      scalar_t* gc = columns.mutable_data_ptr<scalar_t>();
      scalar_t* gi = grad_input.mutable_data_ptr<scalar_t>();
      scalar_t* go = grad_offset.mutable_data_ptr<scalar_t>();
      scalar_t* gm = mask.defined() ? grad_mask.mutable_data_ptr<scalar_t>() : nullptr;
      at::parallel_for(0, s.batch, 1, [&](int64_t begin, int64_t end) {
        for (int64_t image = begin; image < end; ++image) {
          deform_conv_col2im_cpu<scalar_t>(in, off, m, gc, s, image, gi, go, gm);
        }
      });
    });
  };
  return k;
}

const DeformConvKernels& cpu() {
  static const DeformConvKernels k = cpu_kernels();
  return k;
}

DeformConvParams params_of(int64_t stride_h, int64_t stride_w, int64_t pad_h,
                           int64_t pad_w, int64_t dilation_h,
                           int64_t dilation_w, int64_t groups,
                           int64_t deform_groups, int64_t im2col_step) {
  return DeformConvParams{stride_h,   stride_w, pad_h,         pad_w,
                          dilation_h, dilation_w, groups, deform_groups,
                          im2col_step};
}

at::Tensor deform_conv2d_forward_cpu(
    const at::Tensor& input, const at::Tensor& offset,
    const std::optional<at::Tensor>& mask, const at::Tensor& weight,
    const std::optional<at::Tensor>& bias, int64_t stride_h, int64_t stride_w,
    int64_t pad_h, int64_t pad_w, int64_t dilation_h, int64_t dilation_w,
    int64_t groups, int64_t deform_groups, int64_t im2col_step) {
  const DeformConvArgs a = deform_conv_prepare(
      input, offset, mask, weight, bias,
      params_of(stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w,
                groups, deform_groups, im2col_step));
  if (is_reduced_float(input)) {
    return deform_conv2d_forward_cpu(
               input.to(at::kFloat), offset.to(at::kFloat),
               float_if_reduced(mask), weight.to(at::kFloat),
               float_if_reduced(bias), stride_h, stride_w, pad_h, pad_w,
               dilation_h, dilation_w, groups, deform_groups, im2col_step)
        .to(input.scalar_type());
  }
  return deform_conv_forward_impl(a, cpu());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
deform_conv2d_backward_cpu(
    const at::Tensor& grad_output, const at::Tensor& input,
    const at::Tensor& offset, const std::optional<at::Tensor>& mask,
    const at::Tensor& weight, const std::optional<at::Tensor>& bias,
    int64_t stride_h, int64_t stride_w, int64_t pad_h, int64_t pad_w,
    int64_t dilation_h, int64_t dilation_w, int64_t groups,
    int64_t deform_groups, int64_t im2col_step) {
  const DeformConvArgs a = deform_conv_prepare(
      input, offset, mask, weight, bias,
      params_of(stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w,
                groups, deform_groups, im2col_step));
  if (is_reduced_float(input)) {
    check_same_dtype(input, grad_output, kOp, "input", "grad_output");
    const at::ScalarType dtype = input.scalar_type();
    auto [gi, go, gm, gw, gb] = deform_conv2d_backward_cpu(
        grad_output.to(at::kFloat), input.to(at::kFloat),
        offset.to(at::kFloat), float_if_reduced(mask), weight.to(at::kFloat),
        float_if_reduced(bias), stride_h, stride_w, pad_h, pad_w, dilation_h,
        dilation_w, groups, deform_groups, im2col_step);
    return {gi.to(dtype), go.to(dtype), gm.to(dtype), gw.to(dtype),
            gb.to(dtype)};
  }
  return deform_conv_backward_impl(grad_output, a, cpu());
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(visdet_ops, m) {
  m.def(
      "deform_conv2d(Tensor input, Tensor offset, Tensor? mask, Tensor weight, "
      "Tensor? bias, int stride_h, int stride_w, int pad_h, int pad_w, "
      "int dilation_h, int dilation_w, int groups, int deform_groups, "
      "int im2col_step) -> Tensor");
  m.def(
      "_deform_conv2d_backward(Tensor grad_output, Tensor input, "
      "Tensor offset, Tensor? mask, Tensor weight, Tensor? bias, int stride_h, "
      "int stride_w, int pad_h, int pad_w, int dilation_h, int dilation_w, "
      "int groups, int deform_groups, int im2col_step) -> "
      "(Tensor, Tensor, Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(visdet_ops, CPU, m) {
  m.impl("deform_conv2d", &deform_conv2d_forward_cpu);
  m.impl("_deform_conv2d_backward", &deform_conv2d_backward_cpu);
}

}  // namespace visdet_ops
