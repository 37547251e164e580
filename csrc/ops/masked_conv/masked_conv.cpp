// masked_conv2d: schema, checks, the device-independent implementation and
// the CPU registration.
//
// mmcv semantics, generalised where mmcv asserts: output [N, C_out, H_out,
// W_out] is conv2d(features, weight, bias, padding, stride 1) at the positions
// (h, w) with mask[h, w] > 0 and zero elsewhere; mask is [1, H, W] (shared by
// the batch; mmcv requires N == 1) or [N, H, W] and indexes output
// positions; positions outside H_out x W_out or H x W are never active.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include "common/checks.h"
#include "common/reduced_float.h"
#include "masked_conv.h"

namespace visdet_ops {
namespace {

constexpr const char* kOp = "masked_conv2d";

struct Checked {
  int64_t batch, in_channels, height, width, out_channels, kh, kw, out_h,
      out_w;
};

Checked check_args(const at::Tensor& features, const at::Tensor& mask,
                   const at::Tensor& weight, int64_t pad_h, int64_t pad_w) {
  check_dim(features, 4, kOp, "features");
  check_floating(features, kOp, "features");
  check_dim(weight, 4, kOp, "weight");
  check_same_dtype(features, weight, kOp, "features", "weight");
  check_same_device(features, weight, kOp, "features", "weight");
  check_same_device(features, mask, kOp, "features", "mask");
  TORCH_CHECK(mask.dim() == 3, kOp, ": mask must have shape [1, H, W] or [N, H, W], got ",
              mask.sizes());
  TORCH_CHECK(!mask.is_complex(), kOp, ": mask must be a real or bool tensor, got ",
              mask.scalar_type());
  Checked c{features.size(0), features.size(1), features.size(2), features.size(3),
            weight.size(0),   weight.size(2),   weight.size(3),   0, 0};
  TORCH_CHECK(mask.size(1) == c.height && mask.size(2) == c.width &&
                  (mask.size(0) == 1 || mask.size(0) == c.batch),
              kOp, ": mask must have shape [1, H, W] or [N, H, W] with features' N, H, W ",
              features.sizes(), ", got ", mask.sizes());
  TORCH_CHECK(weight.size(1) == c.in_channels, kOp,
              ": weight must have shape [C_out, C_in, KH, KW] with C_in = features.size(1) = ",
              c.in_channels, " (groups=1), got ", weight.sizes());
  TORCH_CHECK(c.kh > 0 && c.kw > 0, kOp, ": weight's kernel size must be positive, got ",
              weight.sizes());
  TORCH_CHECK(pad_h >= 0 && pad_w >= 0, kOp, ": padding must be >= 0, got (", pad_h,
              ", ", pad_w, ")");
  check_int_range(pad_h, 0, int_bounds::kMaxPadding, kOp, "pad_h");
  check_int_range(pad_w, 0, int_bounds::kMaxPadding, kOp, "pad_w");
  c.out_h = c.height + 2 * pad_h - c.kh + 1;
  c.out_w = c.width + 2 * pad_w - c.kw + 1;
  TORCH_CHECK(c.out_h >= 0 && c.out_w >= 0, kOp,
              ": the kernel is larger than the padded input: features ", features.sizes(),
              ", weight ", weight.sizes(), ", padding (", pad_h, ", ", pad_w, ")");
  checked_numel({c.batch, c.out_channels, c.out_h, c.out_w}, kOp,
                "the output [N, C_out, out_h, out_w]");
  return c;
}

// Active positions as [P, 3] (n, h, w) rows, row-major order.
at::Tensor active_positions(const at::Tensor& mask, const Checked& c,
                            int64_t map_h, int64_t map_w) {
  at::Tensor m = mask.narrow(1, 0, map_h).narrow(2, 0, map_w);
  m = m.scalar_type() == at::kBool ? m : m.gt(0);
  m = m.expand({c.batch, map_h, map_w});
  // nonzero may return a transposed [3, P] buffer: the kernels read rows.
  return at::nonzero(m).contiguous();
}

at::ScalarType column_type(at::ScalarType t) {
  return (t == at::kHalf || t == at::kBFloat16) ? at::kFloat : t;
}

}  // namespace

at::Tensor masked_conv2d_forward_impl(const at::Tensor& features,
                                      const at::Tensor& mask,
                                      const at::Tensor& weight,
                                      const std::optional<at::Tensor>& bias,
                                      int64_t pad_h, int64_t pad_w,
                                      const MaskedConvDevice& device) {
  // This op's own GEMMs and sums: a backward run inside torch.autocast
  // (loss.backward() in the autocast region) must not have them recast.
  const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  const Checked c = check_args(features, mask, weight, pad_h, pad_w);
  if (bias.has_value()) {
    TORCH_CHECK(bias->dim() == 1 && bias->size(0) == c.out_channels, kOp,
                ": bias must have shape [C_out] = [", c.out_channels, "], got ",
                bias->sizes());
    check_same_dtype(features, *bias, kOp, "features", "bias");
    check_same_device(features, *bias, kOp, "features", "bias");
  }
  at::Tensor output =
      at::zeros({c.batch, c.out_channels, c.out_h, c.out_w}, features.options());
  const int64_t map_h = std::min(c.height, c.out_h), map_w = std::min(c.width, c.out_w);
  if (output.numel() == 0 || map_h == 0 || map_w == 0) return output;
  const at::Tensor idx = active_positions(mask, c, map_h, map_w);
  const int64_t num_pos = idx.size(0);
  if (num_pos == 0) return output;
  const MaskedConvGeometry g{c.in_channels, c.height, c.width, c.kh, c.kw,
                             pad_h,         pad_w,    map_h,   map_w};
  const at::ScalarType ct = column_type(features.scalar_type());
  at::Tensor cols = at::empty({num_pos, c.in_channels * c.kh * c.kw},
                              features.options().dtype(ct));
  device.im2col(features.contiguous(), idx, g, cols);
  const at::Tensor w = weight.reshape({c.out_channels, -1}).to(ct);
  const at::Tensor rows = bias.has_value() ? at::addmm(bias->to(ct), cols, w.t())
                                           : at::mm(cols, w.t());
  device.col2im(rows.contiguous(), idx, output);
  return output;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> masked_conv2d_backward_impl(
    const at::Tensor& grad_output, const at::Tensor& features,
    const at::Tensor& mask, const at::Tensor& weight, int64_t pad_h,
    int64_t pad_w, const MaskedConvDevice& device) {
  // This op's own GEMMs and sums: a backward run inside torch.autocast
  // (loss.backward() in the autocast region) must not have them recast.
  const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  const Checked c = check_args(features, mask, weight, pad_h, pad_w);
  TORCH_CHECK(grad_output.dim() == 4 && grad_output.size(0) == c.batch &&
                  grad_output.size(1) == c.out_channels &&
                  grad_output.size(2) == c.out_h && grad_output.size(3) == c.out_w,
              kOp, ": grad_output must have shape [", c.batch, ", ", c.out_channels,
              ", ", c.out_h, ", ", c.out_w, "], got ", grad_output.sizes());
  check_same_dtype(grad_output, features, kOp, "grad_output", "features");
  check_same_device(grad_output, features, kOp, "grad_output", "features");
  const at::ScalarType ct = column_type(features.scalar_type());
  const int64_t map_h = std::min(c.height, c.out_h), map_w = std::min(c.width, c.out_w);
  at::Tensor idx;
  if (grad_output.numel() > 0 && map_h > 0 && map_w > 0) {
    idx = active_positions(mask, c, map_h, map_w);
  }
  const int64_t num_pos = idx.defined() ? idx.size(0) : 0;
  // (With C_in == 0 there are positions but no features: the bias still
  // gets its gradient.)
  if (num_pos == 0) {
    return {at::zeros_like(features, at::MemoryFormat::Contiguous),
            at::zeros_like(weight, at::MemoryFormat::Contiguous),
            at::zeros({c.out_channels}, weight.options())};
  }
  const int64_t K = c.in_channels * c.kh * c.kw;
  // The output gradient at the active positions: an im2col of grad_output
  // with a 1x1 window.
  const MaskedConvGeometry g_out{c.out_channels, c.out_h, c.out_w, 1, 1, 0, 0,
                                 map_h, map_w};
  at::Tensor grad_rows = at::empty({num_pos, c.out_channels}, features.options().dtype(ct));
  device.im2col(grad_output.contiguous(), idx, g_out, grad_rows);

  const MaskedConvGeometry g{c.in_channels, c.height, c.width, c.kh, c.kw,
                             pad_h,         pad_w,    map_h,   map_w};
  at::Tensor cols = at::empty({num_pos, K}, features.options().dtype(ct));
  device.im2col(features.contiguous(), idx, g, cols);
  const at::Tensor w = weight.reshape({c.out_channels, K}).to(ct);

  at::Tensor grad_weight =
      at::mm(grad_rows.t(), cols).view(weight.sizes()).to(weight.scalar_type());
  at::Tensor grad_bias = grad_rows.sum(0).to(weight.scalar_type());
  const at::Tensor grad_cols = at::mm(grad_rows, w).contiguous();

  // Row of each active position, -1 elsewhere: the gather that follows needs
  // no atomics.
  at::Tensor pos_map = at::full({c.batch, map_h, map_w}, -1, idx.options());
  pos_map.index_put_({idx.select(1, 0), idx.select(1, 1), idx.select(1, 2)},
                     at::arange(num_pos, idx.options()));
  at::Tensor grad_input = at::empty(features.sizes(), features.options());
  device.grad_input(grad_cols, pos_map, g, grad_input);
  return {grad_input, grad_weight.contiguous(), grad_bias};
}

namespace {

void im2col_cpu(const at::Tensor& input, const at::Tensor& idx,
                const MaskedConvGeometry& g, at::Tensor& cols) {
  AT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "masked_im2col_cpu", [&] {
    const scalar_t* in = input.const_data_ptr<scalar_t>();
    const int64_t* ix = idx.const_data_ptr<int64_t>();
    scalar_t* out = cols.mutable_data_ptr<scalar_t>();
    at::parallel_for(0, cols.numel(), 4096, [&](int64_t b, int64_t e) {
      masked_im2col_cpu<scalar_t>(in, ix, g, b, e, out);
    });
  });
}

void col2im_cpu(const at::Tensor& rows, const at::Tensor& idx, at::Tensor& output) {
  AT_DISPATCH_FLOATING_TYPES(output.scalar_type(), "masked_col2im_cpu", [&] {
    masked_col2im_cpu<scalar_t>(rows.const_data_ptr<scalar_t>(),
                                idx.const_data_ptr<int64_t>(), idx.size(0),
                                output.size(1), output.size(2), output.size(3),
                                output.mutable_data_ptr<scalar_t>());
  });
}

void grad_input_cpu(const at::Tensor& grad_cols, const at::Tensor& pos_map,
                    const MaskedConvGeometry& g, at::Tensor& grad_input) {
  AT_DISPATCH_FLOATING_TYPES(grad_input.scalar_type(), "masked_conv_grad_input_cpu", [&] {
    const scalar_t* gc = grad_cols.const_data_ptr<scalar_t>();
    const int64_t* pm = pos_map.const_data_ptr<int64_t>();
    scalar_t* gi = grad_input.mutable_data_ptr<scalar_t>();
    at::parallel_for(0, grad_input.numel(), 4096, [&](int64_t b, int64_t e) {
      masked_conv_grad_input_cpu<scalar_t>(gc, pm, g, b, e, gi);
    });
  });
}

constexpr MaskedConvDevice kCpu{&im2col_cpu, &col2im_cpu, &grad_input_cpu};

at::Tensor masked_conv2d_cpu_kernel(const at::Tensor& features, const at::Tensor& mask,
                                    const at::Tensor& weight,
                                    const std::optional<at::Tensor>& bias,
                                    int64_t pad_h, int64_t pad_w) {
  if (is_reduced_float(features)) {
    check_same_dtype(features, weight, kOp, "features", "weight");
    if (bias.has_value() && bias->defined()) {
      check_same_dtype(features, *bias, kOp, "features", "bias");
    }
    return masked_conv2d_cpu_kernel(features.to(at::kFloat), mask,
                                    weight.to(at::kFloat), float_if_reduced(bias),
                                    pad_h, pad_w)
        .to(features.scalar_type());
  }
  return masked_conv2d_forward_impl(features, mask, weight, bias, pad_h, pad_w, kCpu);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> masked_conv2d_backward_cpu_kernel(
    const at::Tensor& grad_output, const at::Tensor& features, const at::Tensor& mask,
    const at::Tensor& weight, int64_t pad_h, int64_t pad_w) {
  if (is_reduced_float(features)) {
    check_same_dtype(features, weight, kOp, "features", "weight");
    check_same_dtype(grad_output, features, kOp, "grad_output", "features");
    const at::ScalarType dtype = features.scalar_type();
    auto [grad_features, grad_weight, grad_bias] =
        masked_conv2d_backward_cpu_kernel(grad_output.to(at::kFloat),
                                          features.to(at::kFloat), mask,
                                          weight.to(at::kFloat), pad_h, pad_w);
    return {grad_features.to(dtype), grad_weight.to(dtype), grad_bias.to(dtype)};
  }
  return masked_conv2d_backward_impl(grad_output, features, mask, weight, pad_h, pad_w,
                                     kCpu);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(visdet_ops, m) {
  m.def(
      "masked_conv2d(Tensor features, Tensor mask, Tensor weight, Tensor? bias, "
      "int pad_h, int pad_w) -> Tensor");
  m.def(
      "_masked_conv2d_backward(Tensor grad_output, Tensor features, Tensor mask, "
      "Tensor weight, int pad_h, int pad_w) -> (Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(visdet_ops, CPU, m) {
  m.impl("masked_conv2d", &masked_conv2d_cpu_kernel);
  m.impl("_masked_conv2d_backward", &masked_conv2d_backward_cpu_kernel);
}

}  // namespace visdet_ops
