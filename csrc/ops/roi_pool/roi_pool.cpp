// roi_pool: schema, and the argument checks and prepare steps shared by all
// devices. Each device registers from its own host file: roi_pool_cpu_host.cpp
// and roi_pool_cuda_host.cpp. One source for the classic and the stable build
// (common/host.h). Autograd, autocast and the CUDA backward's determinism
// alert are registered in visdet_ops/ops/roi_pool.py.
#include <limits>
#include <tuple>

#include "common/checks.h"
#include "common/host.h"
#include "ops/_rois/rois.h"
#include "roi_pool.h"

namespace visdet_ops {
namespace {

using host::ScalarType;
using host::Tensor;

constexpr const char* kOp = "roi_pool";

// argmax is an int32 offset into one input plane.
void check_plane_fits_int32(int64_t height, int64_t width) {
  // Division, not height * width: that product may wrap for the backward's
  // shape arguments.
  VISDET_CHECK(height == 0 ||
                   width <= std::numeric_limits<int32_t>::max() / height,
               kOp,
               ": input planes of more than 2^31 - 1 elements are not "
               "supported (argmax is int32), got ", height, " x ", width);
}

RoIPoolShape check_forward(const Tensor& input, const Tensor& rois,
                           int64_t pooled_height, int64_t pooled_width,
                           double spatial_scale) {
  check_dim(input, 4, kOp, "input");
  check_rois_shape(rois, kRoIColumns, kOp);
  check_floating(input, kOp, "input");
  check_rois_dtype(input, rois, kOp, "input");
  check_same_device(input, rois, kOp, "input", "rois");
  check_pooled_size(pooled_height, pooled_width, kOp);
  check_roi_output_size(input, rois, pooled_height, pooled_width, kOp);
  check_spatial_scale(spatial_scale, kOp);
  RoIPoolShape s{input.size(0), rois.size(0),  input.size(1), input.size(2),
                 input.size(3), pooled_height, pooled_width};
  VISDET_CHECK(rois.size(0) == 0 || (s.height > 0 && s.width > 0), kOp,
               ": input must have a non-empty spatial size, got shape ",
               host::shape_of(input));
  check_plane_fits_int32(s.height, s.width);
  // In the compute dtype, which the CPU check reads (16-bit RoIs widen exactly).
  check_rois_values_nosync(
      host::to_dtype(rois, roi_compute_dtype(host::dtype_of(input))),
      input.size(0), kOp);
  return s;
}

RoIPoolShape check_backward(const Tensor& grad_output, const Tensor& rois,
                            const Tensor& argmax, int64_t batch_size,
                            int64_t channels, int64_t height, int64_t width) {
  check_rois_shape(rois, kRoIColumns, kOp);
  check_dim(grad_output, 4, kOp, "grad_output");
  check_floating(grad_output, kOp, "grad_output");
  check_rois_dtype(grad_output, rois, kOp, "grad_output");
  check_same_device(grad_output, rois, kOp, "grad_output", "rois");
  check_same_device(grad_output, argmax, kOp, "grad_output", "argmax");
  check_pooled_size(grad_output.size(2), grad_output.size(3), kOp);
  VISDET_CHECK(batch_size >= 0 && channels >= 0 && height >= 0 && width >= 0,
               kOp, ": the input shape must be non-negative, got [",
               batch_size, ", ", channels, ", ", height, ", ", width, "]");
  checked_numel({batch_size, channels, height, width}, kOp,
                "grad_input [batch_size, channels, height, width]");
  check_plane_fits_int32(height, width);
  RoIPoolShape s{batch_size, rois.size(0),        channels,
                 height,     width,               grad_output.size(2),
                 grad_output.size(3)};
  VISDET_CHECK(grad_output.size(0) == s.num_rois &&
                   grad_output.size(1) == channels,
               kOp, ": grad_output must have shape [", s.num_rois, ", ",
               channels, ", PH, PW], got ", host::shape_of(grad_output));
  VISDET_CHECK(host::same_shape(argmax, grad_output), kOp,
               ": argmax must have the shape of grad_output ",
               host::shape_of(grad_output), ", got ", host::shape_of(argmax));
  VISDET_CHECK(host::dtype_of(argmax) == ScalarType::Int, kOp,
               ": argmax must be int32, got ", host::dtype_of(argmax));
  // No check of the RoI values: the forward made it, and the kernels skip an
  // invalid RoI (and an argmax outside the plane), so a direct call with bad
  // values cannot read or write out of bounds either.
  return s;
}

}  // namespace

RoIPoolForward roi_pool_prepare_forward(const Tensor& input,
                                        const Tensor& rois,
                                        int64_t pooled_height,
                                        int64_t pooled_width,
                                        double spatial_scale) {
  RoIPoolForward f;
  f.shape = check_forward(input, rois, pooled_height, pooled_width,
                          spatial_scale);
  const RoIPoolShape& s = f.shape;
  const ScalarType dtype = host::dtype_of(input);
  f.input = host::contiguous(input);
  f.rois = host::contiguous(host::to_dtype(rois, roi_compute_dtype(dtype)));
  f.output =
      host::empty({s.num_rois, s.channels, s.pooled_h, s.pooled_w}, dtype, input);
  f.argmax = host::empty({s.num_rois, s.channels, s.pooled_h, s.pooled_w},
                         ScalarType::Int, input);
  return f;
}

RoIPoolBackward roi_pool_prepare_backward(const Tensor& grad_output,
                                          const Tensor& rois,
                                          const Tensor& argmax,
                                          int64_t batch_size, int64_t channels,
                                          int64_t height, int64_t width) {
  const RoIPoolShape shape = check_backward(
      grad_output, rois, argmax, batch_size, channels, height, width);
  // The CUDA kernel too reads a contiguous grad_output into a zeroed buffer.
  RoIPoolBackward b{roi_grad_buffers(grad_output, rois, batch_size, channels,
                                     height, width,
                                     RoIGradLayout::kContiguousZeroed)};
  b.shape = shape;
  b.argmax = host::contiguous(argmax);
  return b;
}

VISDET_LIBRARY_FRAGMENT(m) {
  m.def(
      "roi_pool(Tensor input, Tensor rois, SymInt pooled_height, "
      "SymInt pooled_width, float spatial_scale) -> (Tensor, Tensor)");
  m.def(
      "_roi_pool_backward(Tensor grad_output, Tensor rois, Tensor argmax, "
      "SymInt batch_size, SymInt channels, SymInt height, SymInt width) "
      "-> Tensor");
}

}  // namespace visdet_ops
