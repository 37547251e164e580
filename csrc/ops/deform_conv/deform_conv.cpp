// deform_conv: schema, argument checks and prepared arguments shared by all
// devices, the chunked GEMM driver shared by the CPU and CUDA host layers.
// Each device registers from its own host file: deform_conv_cpu_host.cpp and
// deform_conv_cuda_host.cpp. One source for the classic and the stable build
// (common/host.h). Autograd, autocast and the CUDA backward's determinism
// alert are registered in visdet_ops/ops/deform_conv.py.
//
// One op serves DCNv1 (mask = None) and DCNv2. Per chunk of images:
//   forward:  columns = im2col(input, offset, mask)          [C*KK, B*OH*OW]
//             out     = W_g @ columns_g (+ bias), per group
//   backward: grad_columns = W_g^T @ grad_out_g
//             col2im(grad_columns) -> grad_input, grad_offset, grad_mask,
//               and, in place of each grad_columns element it consumed, the
//               column value (col2im loads the same corners im2col would)
//             grad_W_g += grad_out_g @ columns_g^T
// A whole chunk goes through one GEMM (N = B * OH * OW columns; a batched
// GEMM over the groups): fewer, larger GEMMs than a per-image loop. The
// GEMMs are functional ATen calls (aten::mm / aten::bmm by name in the
// stable build, which cannot pass addmm's Scalar arguments at its floor): a
// GEMM's result is a new tensor, the bias is added after it, and each
// chunk's result is copied into the NCHW output (no copy for one image).
#include <algorithm>
#include <optional>
#include <tuple>

#include "common/checks.h"
#include "common/host.h"
#include "deform_conv.h"

namespace visdet_ops {
namespace {

using host::ScalarType;
using host::Tensor;

constexpr const char* kOp = "deform_conv2d";

// Without an explicit im2col_step, chunks are as large as a column buffer of
// this many elements allows (512 MiB in float32), at least one image.
constexpr int64_t kMaxAutoColumnElements = int64_t{1} << 27;

void check_params(const DeformConvParams& p) {
  VISDET_CHECK(p.stride_h > 0 && p.stride_w > 0, kOp,
               ": stride must be positive, got (", p.stride_h, ", ", p.stride_w,
               ")");
  VISDET_CHECK(p.pad_h >= 0 && p.pad_w >= 0, kOp,
               ": padding must be non-negative, got (", p.pad_h, ", ", p.pad_w,
               ")");
  VISDET_CHECK(p.dilation_h > 0 && p.dilation_w > 0, kOp,
               ": dilation must be positive, got (", p.dilation_h, ", ",
               p.dilation_w, ")");
  VISDET_CHECK(p.groups > 0, kOp, ": groups must be positive, got ", p.groups);
  VISDET_CHECK(p.deform_groups > 0, kOp,
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

void check_tensor(const Tensor& input, const Tensor& t,
                  const char* name) {
  check_same_dtype(input, t, kOp, "input", name);
  check_same_device(input, t, kOp, "input", name);
}

// Checks every argument (the messages name input's dtype and shapes as
// given) and returns the prepared arguments in the kernels' dtype: float32
// copies of 16-bit tensors where the device has no 16-bit kernels.
DeformConvForward prepare(const Tensor& input, const Tensor& offset,
                          const std::optional<Tensor>& mask,
                          const Tensor& weight,
                          const std::optional<Tensor>& bias,
                          const DeformConvParams& p,
                          const DeformConvKernels& kernels) {
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
  VISDET_CHECK(kh > 0 && kw > 0, kOp,
               ": weight must have a non-empty kernel, got shape ",
               host::shape_of(weight));
  VISDET_CHECK(weight.size(1) * p.groups == c, kOp, ": input has ", c,
               " channels but weight of shape ", host::shape_of(weight),
               " with groups=", p.groups, " expects ",
               weight.size(1) * p.groups);
  VISDET_CHECK(out_channels % p.groups == 0, kOp, ": weight.size(0) (",
               out_channels, ") must be divisible by groups (", p.groups, ")");
  VISDET_CHECK(c % p.deform_groups == 0, kOp, ": input channels (", c,
               ") must be divisible by deform_groups (", p.deform_groups, ")");
  // The padded input minus the dilated kernel, checked before dividing by
  // the stride: C++ division truncates towards 0, so a span in (-stride, 0)
  // would give a made-up 1-wide output.
  const int64_t span_h = h + 2 * p.pad_h - (p.dilation_h * (kh - 1) + 1);
  const int64_t span_w = w + 2 * p.pad_w - (p.dilation_w * (kw - 1) + 1);
  VISDET_CHECK(span_h >= 0 && span_w >= 0, kOp, ": the input (", h, " x ", w,
               ", shape ", host::shape_of(input), ") is too small for a ", kh,
               "x", kw, " kernel with padding (", p.pad_h, ", ", p.pad_w,
               ") and dilation (", p.dilation_h, ", ", p.dilation_w,
               "): the padded input (", h + 2 * p.pad_h, " x ",
               w + 2 * p.pad_w, ") is smaller than the dilated kernel (",
               p.dilation_h * (kh - 1) + 1, " x ",
               p.dilation_w * (kw - 1) + 1, ")");
  const int64_t out_h = span_h / p.stride_h + 1;
  const int64_t out_w = span_w / p.stride_w + 1;
  const int64_t kk = kh * kw;
  checked_numel({n, out_channels, out_h, out_w}, kOp,
                "the output [N, C_out, out_h, out_w]");
  checked_numel({c, kk, n, out_h, out_w}, kOp,
                "the column buffer [C * kh * kw, N * out_h * out_w]");
  VISDET_CHECK(offset.size(0) == n &&
                   offset.size(1) == 2 * p.deform_groups * kk &&
                   offset.size(2) == out_h && offset.size(3) == out_w,
               kOp,
               ": offset must have shape [N, 2 * deform_groups * kh * kw, "
               "out_h, out_w] = [",
               n, ", ", 2 * p.deform_groups * kk, ", ", out_h, ", ", out_w,
               "], got ", host::shape_of(offset));
  if (mask.has_value()) {
    const Tensor& m = *mask;
    check_dim(m, 4, kOp, "mask");
    check_tensor(input, m, "mask");
    VISDET_CHECK(m.size(0) == n && m.size(1) == p.deform_groups * kk &&
                     m.size(2) == out_h && m.size(3) == out_w,
                 kOp,
                 ": mask must have shape [N, deform_groups * kh * kw, "
                 "out_h, out_w] = [",
                 n, ", ", p.deform_groups * kk, ", ", out_h, ", ", out_w,
                 "], got ", host::shape_of(m));
  }
  if (bias.has_value()) {
    const Tensor& b = *bias;
    check_dim(b, 1, kOp, "bias");
    check_tensor(input, b, "bias");
    VISDET_CHECK(b.size(0) == out_channels, kOp,
                 ": bias must have shape [out_channels] = [", out_channels,
                 "], got ", host::shape_of(b));
  }
  DeformConvForward a;
  a.shape = DeformConvShape{n,            c,            h,
                            w,            out_h,        out_w,
                            kh,           kw,           p.stride_h,
                            p.stride_w,   p.pad_h,      p.pad_w,
                            p.dilation_h, p.dilation_w, p.deform_groups};
  a.params = p;
  a.out_channels = out_channels;
  a.dtype = host::dtype_of(input);
  const ScalarType kt =
      host::is_reduced_float(a.dtype) && !kernels.reduced_float_kernels
          ? ScalarType::Float
          : a.dtype;
  const auto prepared = [kt](const Tensor& t) {
    return host::contiguous(host::to_dtype(t, kt));
  };
  a.input = prepared(input);
  a.offset = prepared(offset);
  a.weight = prepared(weight);
  if (mask.has_value()) a.mask = prepared(*mask);
  if (bias.has_value()) a.bias = prepared(*bias);
  return a;
}

int64_t chunk_size(const DeformConvForward& a) {
  const DeformConvShape& s = a.shape;
  if (a.params.im2col_step > 0) return std::min(a.params.im2col_step, s.batch);
  const int64_t per_image = s.channels * s.kernel_points() * s.out_plane();
  const int64_t fit =
      per_image > 0 ? kMaxAutoColumnElements / per_image : s.batch;
  return std::max<int64_t>(1, std::min(fit, s.batch));
}

std::optional<Tensor> narrow_batch(const std::optional<Tensor>& t,
                                   int64_t start, int64_t length) {
  if (!t.has_value()) return std::nullopt;
  return host::narrow(*t, 0, start, length);
}

// a [G * M, K] times b [G * K, N], group by group: [G * M, N] (one GEMM; a
// batched GEMM for several groups). transpose_a / transpose_b: use the
// group's block of a [G * K, M] / b [G * N, K] transposed instead.
Tensor grouped_mm(const Tensor& a, bool transpose_a, const Tensor& b,
                  bool transpose_b, int64_t groups) {
  if (groups == 1) {
    return host::mm(transpose_a ? host::transpose(a, 0, 1) : a,
                    transpose_b ? host::transpose(b, 0, 1) : b);
  }
  Tensor ga = host::view(a, {groups, a.size(0) / groups, a.size(1)});
  Tensor gb = host::view(b, {groups, b.size(0) / groups, b.size(1)});
  if (transpose_a) ga = host::transpose(ga, 1, 2);
  if (transpose_b) gb = host::transpose(gb, 1, 2);
  const Tensor r = host::bmm(ga, gb);
  return host::view(r, {r.size(0) * r.size(1), r.size(2)});
}

}  // namespace

DeformConvForward deform_conv_prepare_forward(
    const Tensor& input, const Tensor& offset,
    const std::optional<Tensor>& mask, const Tensor& weight,
    const std::optional<Tensor>& bias, const DeformConvParams& params,
    const DeformConvKernels& kernels) {
  DeformConvForward f =
      prepare(input, offset, mask, weight, bias, params, kernels);
  const DeformConvShape& s = f.shape;
  const bool gemm_is_output = s.batch == 1 && f.out_channels > 0 &&
                              s.out_plane() > 0 &&
                              s.channels * s.kernel_points() > 0;
  if (!gemm_is_output) {
    f.output = host::empty({s.batch, f.out_channels, s.out_h, s.out_w},
                           host::dtype_of(f.input), f.input);
  }
  return f;
}

DeformConvBackward deform_conv_prepare_backward(
    const Tensor& grad_output, const Tensor& input, const Tensor& offset,
    const std::optional<Tensor>& mask, const Tensor& weight,
    const std::optional<Tensor>& bias, const DeformConvParams& params,
    const DeformConvKernels& kernels) {
  DeformConvBackward b;
  b.args = prepare(input, offset, mask, weight, bias, params, kernels);
  const DeformConvForward& a = b.args;
  const DeformConvShape& s = a.shape;
  const int64_t n = s.batch, cout = a.out_channels;
  if (host::is_reduced_float(a.dtype) && !kernels.reduced_float_kernels) {
    // The order the float32 path of 16-bit CPU calls has always checked in.
    check_same_dtype(input, grad_output, kOp, "input", "grad_output");
  }
  check_dim(grad_output, 4, kOp, "grad_output");
  check_same_dtype(input, grad_output, kOp, "input", "grad_output");
  check_same_device(input, grad_output, kOp, "input", "grad_output");
  VISDET_CHECK(grad_output.size(0) == n && grad_output.size(1) == cout &&
                   grad_output.size(2) == s.out_h &&
                   grad_output.size(3) == s.out_w,
               kOp, ": grad_output must have shape [", n, ", ", cout, ", ",
               s.out_h, ", ", s.out_w, "], got ", host::shape_of(grad_output));
  const ScalarType kt = host::dtype_of(a.input);
  const ScalarType acc = host::compute_dtype(kt);  // accumulation
  b.grad_output = host::contiguous(host::to_dtype(grad_output, kt));
  // With work to do, every element of grad_offset, grad_mask and grad_weight
  // is written by the chunks (col2im writes each offset/mask gradient once,
  // the first chunk's GEMM gives grad_weight): no zero fill for them.
  b.any = n > 0 && cout > 0 && s.channels * s.kernel_points() > 0;
  const auto alloc = [&b](host::Sizes sizes, ScalarType dtype,
                          const Tensor& like) {
    return b.any ? host::empty(sizes, dtype, like)
                 : host::zeros(sizes, dtype, like);
  };
  // grad_input is accumulated into (atomics) and starts at zero, unless the
  // device's col2im overwrites it.
  const bool overwritten = b.any && kernels.col2im_overwrites != nullptr &&
                           kernels.col2im_overwrites(a.input, s);
  b.grad_input = overwritten
                     ? host::empty({n, s.channels, s.height, s.width}, acc,
                                   a.input)
                     : host::zeros({n, s.channels, s.height, s.width}, acc,
                                   a.input);
  b.grad_offset = alloc({n, a.offset.size(1), s.out_h, s.out_w}, kt, a.input);
  b.grad_mask = a.mask.has_value()
                    ? alloc({n, a.mask->size(1), s.out_h, s.out_w}, kt, a.input)
                    : host::empty({0}, kt, a.input);
  b.grad_bias = a.bias.has_value()
                    ? host::to_dtype(host::sum(b.grad_output, {0, 2, 3}, acc),
                                     kt)
                    : host::empty({0}, kt, a.input);
  return b;
}

Tensor deform_conv2d_forward(const DeformConvForward& a,
                             const DeformConvKernels& kernels) {
  const DeformConvShape& s = a.shape;
  const int64_t n = s.batch, cout = a.out_channels, plane = s.out_plane();
  if (n * cout * plane == 0) return host::to_dtype(a.output, a.dtype);
  const int64_t groups = a.params.groups;
  const int64_t rows = s.channels * s.kernel_points();
  if (rows == 0) {  // no input channels: the output is the bias
    if (a.bias.has_value()) {
      host::copy_into(a.output, host::view(*a.bias, {1, cout, 1, 1}));
    } else {
      host::zero_fill(a.output);
    }
    return host::to_dtype(a.output, a.dtype);
  }
  const int64_t step = chunk_size(a);
  const Tensor buffer =
      host::empty({rows * step * plane}, host::dtype_of(a.input), a.input);
  const Tensor w = host::view(a.weight, {cout, rows / groups});
  const std::optional<Tensor> bias =
      a.bias.has_value()
          ? std::optional<Tensor>(host::view(*a.bias, {cout, 1}))
          : std::nullopt;
  for (int64_t n0 = 0; n0 < n; n0 += step) {
    const int64_t b = std::min(step, n - n0);
    DeformConvShape cs = s;
    cs.batch = b;
    const Tensor columns = host::view(host::narrow(buffer, 0, 0, rows * b * plane),
                                      {rows, b * plane});
    kernels.im2col(host::narrow(a.input, 0, n0, b),
                   host::narrow(a.offset, 0, n0, b),
                   narrow_batch(a.mask, n0, b), cs, columns);
    // [cout, B * OH * OW] in one GEMM per chunk (a batched one over the
    // groups), then the bias (cuBLAS adds nothing here that addmm's
    // beta = 1 pass over the bias did not cost already).
    Tensor out_t = grouped_mm(w, false, columns, false, groups);
    if (bias.has_value()) {
      if (kernels.add_bias != nullptr) {
        kernels.add_bias(out_t, *a.bias);
      } else {
        out_t = host::add(out_t, *bias);
      }
    }
    if (!a.output.defined()) {  // one image: the GEMM's result is the output,
      // reshaped without recording a view (autograd would refuse in-place
      // ops on a view of the op's scratch: issue 39)
      return host::to_dtype(
          host::reshape_result(out_t, {1, cout, s.out_h, s.out_w}), a.dtype);
    }
    // Into NCHW order: [cout, B, plane] -> [B, cout, plane].
    host::copy_into(
        host::view(host::narrow(a.output, 0, n0, b), {b, cout, plane}),
        host::transpose(host::view(out_t, {cout, b, plane}), 0, 1));
  }
  return host::to_dtype(a.output, a.dtype);
}

std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> deform_conv2d_backward(
    const DeformConvBackward& bw, const DeformConvKernels& kernels) {
  const DeformConvForward& a = bw.args;
  const DeformConvShape& s = a.shape;
  const int64_t n = s.batch, cout = a.out_channels, plane = s.out_plane();
  const ScalarType kt = host::dtype_of(a.input);
  const ScalarType acc = host::compute_dtype(kt);  // accumulation
  const int64_t groups = a.params.groups;
  const int64_t rows = s.channels * s.kernel_points();
  const int64_t cin_g = s.channels / groups;
  Tensor grad_weight;  // [cout, rows / groups]: the first chunk's GEMM, then summed
  if (bw.any) {
    const int64_t step = chunk_size(a);
    Tensor grad_out_buffer;
    if (step > 1) {
      grad_out_buffer = host::empty({cout * step * plane}, kt, a.input);
    }
    const Tensor w = host::view(a.weight, {cout, rows / groups});
    const int64_t offset_channels = 2 * s.deform_groups * s.kernel_points();
    const int64_t mask_channels = s.deform_groups * s.kernel_points();
    for (int64_t n0 = 0; n0 < n; n0 += step) {
      const int64_t b = std::min(step, n - n0);
      DeformConvShape cs = s;
      cs.batch = b;
      Tensor go_t;
      if (b == 1) {
        go_t = host::view(host::select(bw.grad_output, 0, n0), {cout, plane});
      } else {
        const Tensor t = host::view(
            host::narrow(grad_out_buffer, 0, 0, cout * b * plane),
            {cout, b, plane});
        host::copy_into(
            t, host::transpose(
                   host::view(host::narrow(bw.grad_output, 0, n0, b),
                              {b, cout, plane}),
                   0, 1));
        go_t = host::view(t, {cout, b * plane});
      }
      const Tensor input = host::narrow(a.input, 0, n0, b);
      const Tensor offset = host::narrow(a.offset, 0, n0, b);
      const std::optional<Tensor> mask = narrow_batch(a.mask, n0, b);
      // grad_columns [rows, B * OH * OW], which col2im turns into the columns
      // in place.
      const Tensor columns = grouped_mm(w, true, go_t, false, groups);
      const int64_t slices = kernels.channel_slices(cs);
      // One channel slice in the dtype of the result: col2im writes
      // grad_offset/grad_mask (contiguous, allocated by the prepare step)
      // directly; else per-slice float parts, summed.
      const bool direct = slices == 1 && acc == kt;
      const Tensor part_offset =
          direct ? host::view(host::narrow(bw.grad_offset, 0, n0, b),
                              {1, b, offset_channels, plane})
                 : host::empty({slices, b, offset_channels, plane}, acc,
                               a.input);
      std::optional<Tensor> part_mask;
      if (mask.has_value()) {
        part_mask = direct ? host::view(host::narrow(bw.grad_mask, 0, n0, b),
                                        {1, b, mask_channels, plane})
                           : host::empty({slices, b, mask_channels, plane},
                                         acc, a.input);
      }
      kernels.col2im(input, offset, mask, columns, cs, slices,
                     host::narrow(bw.grad_input, 0, n0, b), part_offset,
                     part_mask);
      if (!direct && kernels.sum_slices != nullptr) {
        kernels.sum_slices(part_offset, host::narrow(bw.grad_offset, 0, n0, b));
        if (mask.has_value()) {
          kernels.sum_slices(*part_mask, host::narrow(bw.grad_mask, 0, n0, b));
        }
      } else if (!direct) {
        host::copy_into(
            host::narrow(bw.grad_offset, 0, n0, b),
            host::view(slices == 1 ? host::select(part_offset, 0, 0)
                                   : host::sum(part_offset, {0}),
                       {b, offset_channels, s.out_h, s.out_w}));
        if (mask.has_value()) {
          host::copy_into(
              host::narrow(bw.grad_mask, 0, n0, b),
              host::view(slices == 1 ? host::select(*part_mask, 0, 0)
                                     : host::sum(*part_mask, {0}),
                         {b, mask_channels, s.out_h, s.out_w}));
        }
      }
      // grad_W += grad_out @ columns^T (in kt: 16-bit GEMMs accumulate in
      // float inside; their chunks are summed in float).
      const Tensor gw = grouped_mm(go_t, false, columns, true, groups);
      grad_weight =
          n0 == 0 ? gw : host::add(host::to_dtype(grad_weight, acc), gw);
    }
  } else {
    grad_weight = host::zeros({cout, rows / groups}, acc, a.input);
  }
  const Tensor grad_weight_out = host::to_dtype(
      host::view(grad_weight, {cout, cin_g, s.kernel_h, s.kernel_w}), a.dtype);
  return {host::to_dtype(bw.grad_input, a.dtype),
          host::to_dtype(bw.grad_offset, a.dtype),
          host::to_dtype(bw.grad_mask, a.dtype), grad_weight_out,
          host::to_dtype(bw.grad_bias, a.dtype)};
}

VISDET_LIBRARY_FRAGMENT(m) {
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

}  // namespace visdet_ops
