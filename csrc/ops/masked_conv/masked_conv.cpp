// masked_conv2d: schema, checks and prepared arguments, and the
// device-independent driver (GEMMs through ATen). Each device registers from
// its own host file: masked_conv_cpu_host.cpp and masked_conv_cuda_host.cpp.
// One source for the classic and the stable build (common/host.h). Autograd
// and autocast are registered in visdet_ops/ops/masked_conv.py.
//
// mmcv semantics, generalised where mmcv asserts: output [N, C_out, H_out,
// W_out] is conv2d(features, weight, bias, padding, stride 1) at the positions
// (h, w) with mask[h, w] > 0 and zero elsewhere; mask is [1, H, W] (shared by
// the batch; mmcv requires N == 1) or [N, H, W] and indexes output
// positions; positions outside H_out x W_out or H x W are never active.
#include <algorithm>
#include <optional>
#include <tuple>

#include "common/checks.h"
#include "common/host.h"
#include "masked_conv.h"

namespace visdet_ops {
namespace {

using host::ScalarType;
using host::Tensor;

constexpr const char* kOp = "masked_conv2d";

struct Checked {
  int64_t batch, in_channels, height, width, out_channels, kh, kw, out_h,
      out_w;
  int64_t map_h() const { return std::min(height, out_h); }
  int64_t map_w() const { return std::min(width, out_w); }
};

Checked check_args(const Tensor& features, const Tensor& mask,
                   const Tensor& weight, int64_t pad_h, int64_t pad_w) {
  check_dim(features, 4, kOp, "features");
  check_floating(features, kOp, "features");
  check_dim(weight, 4, kOp, "weight");
  check_same_dtype(features, weight, kOp, "features", "weight");
  check_same_device(features, weight, kOp, "features", "weight");
  check_same_device(features, mask, kOp, "features", "mask");
  VISDET_CHECK(mask.dim() == 3, kOp,
               ": mask must have shape [1, H, W] or [N, H, W], got ",
               host::shape_of(mask));
  const ScalarType mask_dtype = host::dtype_of(mask);
  VISDET_CHECK(mask_dtype != ScalarType::ComplexHalf &&
                   mask_dtype != ScalarType::ComplexFloat &&
                   mask_dtype != ScalarType::ComplexDouble,
               kOp, ": mask must be a real or bool tensor, got ", mask_dtype);
  Checked c{features.size(0), features.size(1), features.size(2),
            features.size(3), weight.size(0),   weight.size(2),
            weight.size(3),   0,                0};
  VISDET_CHECK(mask.size(1) == c.height && mask.size(2) == c.width &&
                   (mask.size(0) == 1 || mask.size(0) == c.batch),
               kOp,
               ": mask must have shape [1, H, W] or [N, H, W] with features' "
               "N, H, W ",
               host::shape_of(features), ", got ", host::shape_of(mask));
  VISDET_CHECK(weight.size(1) == c.in_channels, kOp,
               ": weight must have shape [C_out, C_in, KH, KW] with C_in = "
               "features.size(1) = ",
               c.in_channels, " (groups=1), got ", host::shape_of(weight));
  VISDET_CHECK(c.kh > 0 && c.kw > 0, kOp,
               ": weight's kernel size must be positive, got ",
               host::shape_of(weight));
  VISDET_CHECK(pad_h >= 0 && pad_w >= 0, kOp, ": padding must be >= 0, got (",
               pad_h, ", ", pad_w, ")");
  check_int_range(pad_h, 0, int_bounds::kMaxPadding, kOp, "pad_h");
  check_int_range(pad_w, 0, int_bounds::kMaxPadding, kOp, "pad_w");
  c.out_h = c.height + 2 * pad_h - c.kh + 1;
  c.out_w = c.width + 2 * pad_w - c.kw + 1;
  VISDET_CHECK(c.out_h >= 0 && c.out_w >= 0, kOp,
               ": the kernel is larger than the padded input: features ",
               host::shape_of(features), ", weight ", host::shape_of(weight),
               ", padding (", pad_h, ", ", pad_w, ")");
  checked_numel({c.batch, c.out_channels, c.out_h, c.out_w}, kOp,
                "the output [N, C_out, out_h, out_w]");
  return c;
}

void check_bias(const Tensor& features, const Tensor& bias,
                int64_t out_channels) {
  VISDET_CHECK(bias.dim() == 1 && bias.size(0) == out_channels, kOp,
               ": bias must have shape [C_out] = [", out_channels, "], got ",
               host::shape_of(bias));
  check_same_dtype(features, bias, kOp, "features", "bias");
  check_same_device(features, bias, kOp, "features", "bias");
}

// The dtype the device's kernels read and write for a features dtype.
ScalarType kernel_type(ScalarType t, const MaskedConvDevice& device) {
  return host::is_reduced_float(t) && !device.reduced_float_kernels
             ? ScalarType::Float
             : t;
}

// The dtype of the columns and of the GEMMs: float32 for 16-bit features.
ScalarType column_type(ScalarType t) { return host::compute_dtype(t); }

// The positions of mask [1 or N, H, W] inside the [N, map_h, map_w] map, as
// a bool map (expanded over the batch).
Tensor active_map(const Tensor& mask, const Checked& c) {
  Tensor m = host::narrow(host::narrow(mask, 1, 0, c.map_h()), 2, 0,
                          c.map_w());
  if (host::dtype_of(m) != ScalarType::Bool) m = host::greater_than_zero(m);
  return host::expand(m, {c.batch, c.map_h(), c.map_w()});
}

// Active positions as [P, 3] (n, h, w) rows, row-major order. nonzero may
// return a transposed [3, P] buffer: the kernels read rows.
Tensor positions(const Tensor& active) {
  return host::contiguous(host::nonzero(active));
}

MaskedConvGeometry geometry_of(const Checked& c, int64_t pad_h,
                               int64_t pad_w) {
  return MaskedConvGeometry{c.in_channels, c.height, c.width,
                            c.kh,          c.kw,     pad_h,
                            pad_w,         c.map_h(), c.map_w()};
}

}  // namespace

MaskedConvForward masked_conv_prepare_forward(
    const Tensor& features, const Tensor& mask, const Tensor& weight,
    const std::optional<Tensor>& bias, int64_t pad_h, int64_t pad_w,
    const MaskedConvDevice& device) {
  const ScalarType dtype = host::dtype_of(features);
  if (host::is_reduced_float(dtype) && !device.reduced_float_kernels) {
    // The order the float32 path of 16-bit CPU calls has always checked in.
    check_same_dtype(features, weight, kOp, "features", "weight");
    if (bias.has_value()) {
      check_same_dtype(features, *bias, kOp, "features", "bias");
    }
  }
  const Checked c = check_args(features, mask, weight, pad_h, pad_w);
  if (bias.has_value()) check_bias(features, *bias, c.out_channels);
  MaskedConvForward f;
  f.geometry = geometry_of(c, pad_h, pad_w);
  f.out_channels = c.out_channels;
  f.dtype = dtype;
  const ScalarType kt = kernel_type(dtype, device);
  f.output =
      host::zeros({c.batch, c.out_channels, c.out_h, c.out_w}, kt, features);
  if (f.output.numel() == 0 || c.map_h() == 0 || c.map_w() == 0) return f;
  f.idx = positions(active_map(mask, c));
  f.num_pos = f.idx.size(0);
  if (f.num_pos == 0) return f;
  const ScalarType ct = column_type(dtype);
  f.features = host::contiguous(host::to_dtype(features, kt));
  f.weight = host::to_dtype(host::reshape(weight, {c.out_channels, -1}), ct);
  if (bias.has_value()) f.bias = host::to_dtype(*bias, ct);
  return f;
}

MaskedConvBackward masked_conv_prepare_backward(
    const Tensor& grad_output, const Tensor& features, const Tensor& mask,
    const Tensor& weight, int64_t pad_h, int64_t pad_w,
    const MaskedConvDevice& device) {
  const ScalarType dtype = host::dtype_of(features);
  if (host::is_reduced_float(dtype) && !device.reduced_float_kernels) {
    // The order the float32 path of 16-bit CPU calls has always checked in.
    check_same_dtype(features, weight, kOp, "features", "weight");
    check_same_dtype(grad_output, features, kOp, "grad_output", "features");
  }
  const Checked c = check_args(features, mask, weight, pad_h, pad_w);
  VISDET_CHECK(grad_output.dim() == 4 && grad_output.size(0) == c.batch &&
                   grad_output.size(1) == c.out_channels &&
                   grad_output.size(2) == c.out_h &&
                   grad_output.size(3) == c.out_w,
               kOp, ": grad_output must have shape [", c.batch, ", ",
               c.out_channels, ", ", c.out_h, ", ", c.out_w, "], got ",
               host::shape_of(grad_output));
  check_same_dtype(grad_output, features, kOp, "grad_output", "features");
  check_same_device(grad_output, features, kOp, "grad_output", "features");
  MaskedConvBackward b;
  b.geometry = geometry_of(c, pad_h, pad_w);
  // The output gradient at the active positions: an im2col of grad_output
  // with a 1x1 window.
  b.grad_geometry = MaskedConvGeometry{
      c.out_channels, c.out_h, c.out_w, 1, 1, 0, 0, c.map_h(), c.map_w()};
  b.batch = c.batch;
  b.in_channels = c.in_channels;
  b.height = c.height;
  b.width = c.width;
  b.out_channels = c.out_channels;
  b.kh = c.kh;
  b.kw = c.kw;
  b.dtype = dtype;
  if (grad_output.numel() > 0 && c.map_h() > 0 && c.map_w() > 0) {
    b.active = active_map(mask, c);
    b.idx = positions(b.active);
    b.num_pos = b.idx.size(0);
  }
  // (With C_in == 0 there are positions but no features: the bias still
  // gets its gradient.)
  if (b.num_pos == 0) {
    b.grad_input =
        host::zeros({c.batch, c.in_channels, c.height, c.width}, dtype, features);
    b.zero_grad_weight = host::zeros(
        {c.out_channels, c.in_channels, c.kh, c.kw}, dtype, features);
    b.zero_grad_bias = host::zeros({c.out_channels}, dtype, features);
    return b;
  }
  const ScalarType kt = kernel_type(dtype, device);
  b.grad_output = host::contiguous(host::to_dtype(grad_output, kt));
  b.features = host::contiguous(host::to_dtype(features, kt));
  b.weight = host::to_dtype(
      host::reshape(weight, {c.out_channels, c.in_channels * c.kh * c.kw}),
      column_type(dtype));
  b.grad_input =
      host::empty({c.batch, c.in_channels, c.height, c.width}, kt, features);
  return b;
}

Tensor masked_conv2d_forward(const MaskedConvForward& f,
                             const MaskedConvDevice& device) {
  if (f.num_pos == 0) return f.result();
  const MaskedConvGeometry& g = f.geometry;
  const Tensor cols =
      host::empty({f.num_pos, g.channels * g.kh * g.kw},
                  column_type(f.dtype), f.features);
  device.im2col(f.features, f.idx, g, cols);
  // cols @ weight^T (+ bias): addmm with a bias, mm without.
  const Tensor rows = host::linear(cols, f.weight, f.bias);
  device.col2im(host::contiguous(rows), f.idx, f.output);
  return f.result();
}

std::tuple<Tensor, Tensor, Tensor> masked_conv2d_backward(
    const MaskedConvBackward& b, const MaskedConvDevice& device) {
  const int64_t K = b.in_channels * b.kh * b.kw;
  if (b.num_pos == 0) return {b.grad_input, b.zero_grad_weight, b.zero_grad_bias};
  const ScalarType ct = column_type(b.dtype);
  const Tensor grad_rows =
      host::empty({b.num_pos, b.out_channels}, ct, b.features);
  device.im2col(b.grad_output, b.idx, b.grad_geometry, grad_rows);
  const Tensor cols = host::empty({b.num_pos, K}, ct, b.features);
  device.im2col(b.features, b.idx, b.geometry, cols);

  const Tensor grad_weight = host::to_dtype(
      host::view(host::mm(host::transpose(grad_rows, 0, 1), cols),
                 {b.out_channels, b.in_channels, b.kh, b.kw}),
      b.dtype);
  const Tensor grad_bias = host::to_dtype(host::sum(grad_rows, {0}), b.dtype);
  const Tensor grad_cols = host::contiguous(host::mm(grad_rows, b.weight));

  // Row of each active position, -1 elsewhere: the gather that follows needs
  // no atomics. An active position's row in idx (nonzero's row-major order)
  // is the number of active positions before it in the flattened map.
  const int64_t map_numel = b.batch * b.geometry.map_h * b.geometry.map_w;
  const Tensor active = host::reshape(b.active, {map_numel});
  const Tensor before = host::cumsum(
      host::narrow(host::pad_zeros(active, {1, 0}), 0, 0, map_numel), 0,
      ScalarType::Long);
  const Tensor pos_map = host::where(
      active, before, host::full({}, -1.0, ScalarType::Long, before));
  device.grad_input(grad_cols, pos_map, b.geometry, b.grad_input);
  return {host::to_dtype(b.grad_input, b.dtype), host::contiguous(grad_weight),
          grad_bias};
}

VISDET_LIBRARY_FRAGMENT(m) {
  m.def(
      "masked_conv2d(Tensor features, Tensor mask, Tensor weight, Tensor? "
      "bias, int pad_h, int pad_w) -> Tensor");
  m.def(
      "_masked_conv2d_backward(Tensor grad_output, Tensor features, Tensor "
      "mask, Tensor weight, int pad_h, int pad_w) -> (Tensor, Tensor, "
      "Tensor)");
}

}  // namespace visdet_ops
