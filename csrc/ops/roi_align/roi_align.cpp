// roi_align: schema, and the argument checks and prepare steps shared by all
// devices. Each device registers from its own host file: roi_align_cpu_host.cpp
// and roi_align_cuda_host.cpp. One source for the classic and the stable build
// (common/host.h). Autograd, autocast and the CUDA backward's determinism
// alert are registered in visdet_ops/ops/roi_align.py.
#include <string>

#include "common/checks.h"
#include "common/host.h"
#include "ops/_rois/rois.h"
#include "roi_align.h"
#include "roi_align_kernel.h"

namespace visdet_ops {
namespace {

using host::ScalarType;
using host::Tensor;

constexpr const char* kOp = "roi_align";

int parse_pool_mode(host::StringArg pool_mode) {
  if (pool_mode == "max") return roi_align_detail::kMax;
  if (pool_mode == "avg") return roi_align_detail::kAvg;
  VISDET_CHECK(false, kOp, ": pool_mode must be 'avg' or 'max', got '",
               std::string(pool_mode), "'");
  return -1;  // unreachable
}

RoIAlignShape check_forward(const Tensor& input, const Tensor& rois,
                            int64_t pooled_height, int64_t pooled_width,
                            double spatial_scale, int64_t sampling_ratio,
                            host::StringArg pool_mode, bool aligned) {
  check_dim(input, 4, kOp, "input");
  check_rois_shape(rois, kRoIColumns, kOp);
  check_floating(input, kOp, "input");
  check_rois_dtype(input, rois, kOp, "input");
  check_same_device(input, rois, kOp, "input", "rois");
  check_output_size_and_scale(pooled_height, pooled_width, spatial_scale,
                              kOp);
  check_roi_output_size(input, rois, pooled_height, pooled_width, kOp);
  check_sampling_ratio(sampling_ratio, kOp);
  RoIAlignShape s{input.size(0), rois.size(0),  input.size(1),
                  input.size(2), input.size(3), pooled_height,
                  pooled_width,  sampling_ratio, parse_pool_mode(pool_mode),
                  aligned};
  VISDET_CHECK(rois.size(0) == 0 || (s.height > 0 && s.width > 0), kOp,
              ": input must have a non-empty spatial size, got shape ",
              host::shape_of(input));
  // In the compute dtype, which the CPU check reads (16-bit RoIs widen exactly).
  check_rois_values_nosync(
      host::to_dtype(rois, roi_compute_dtype(host::dtype_of(input))),
      input.size(0), kOp);
  return s;
}

RoIAlignShape check_backward(
    const Tensor& grad_output, const Tensor& rois,
    const Tensor& argmax_y, const Tensor& argmax_x,
    int64_t batch_size, int64_t channels, int64_t height, int64_t width,
    double spatial_scale, int64_t sampling_ratio, host::StringArg pool_mode,
    bool aligned) {
  check_rois_shape(rois, kRoIColumns, kOp);
  check_dim(grad_output, 4, kOp, "grad_output");
  check_floating(grad_output, kOp, "grad_output");
  check_rois_dtype(grad_output, rois, kOp, "grad_output");
  check_same_device(grad_output, rois, kOp, "grad_output", "rois");
  check_output_size_and_scale(grad_output.size(2), grad_output.size(3),
                              spatial_scale, kOp);
  check_sampling_ratio(sampling_ratio, kOp);
  RoIAlignShape s{batch_size,          rois.size(0),        channels,
                  height,              width,               grad_output.size(2),
                  grad_output.size(3), sampling_ratio,      parse_pool_mode(pool_mode),
                  aligned};
  VISDET_CHECK(grad_output.size(0) == s.num_rois && grad_output.size(1) == channels,
              kOp, ": grad_output must have shape [", s.num_rois, ", ",
              channels, ", PH, PW], got ", host::shape_of(grad_output));
  if (s.pool_mode == roi_align_detail::kMax) {
    VISDET_CHECK(host::same_shape(argmax_y, grad_output) &&
                     host::same_shape(argmax_x, grad_output),
                 kOp, ": argmax_y and argmax_x must have the shape of "
                 "grad_output ", host::shape_of(grad_output), ", got ",
                 host::shape_of(argmax_y), " and ", host::shape_of(argmax_x));
    const ScalarType want = roi_compute_dtype(host::dtype_of(grad_output));
    VISDET_CHECK(host::dtype_of(argmax_y) == want &&
                     host::dtype_of(argmax_x) == want,
                 kOp, ": argmax_y and argmax_x must be ", want,
                 " for grad_output of ", host::dtype_of(grad_output), ", got ",
                 host::dtype_of(argmax_y), " and ", host::dtype_of(argmax_x));
    check_same_device(grad_output, argmax_y, kOp, "grad_output", "argmax_y");
    check_same_device(grad_output, argmax_x, kOp, "grad_output", "argmax_x");
  }
  VISDET_CHECK(batch_size >= 0 && channels >= 0 && height >= 0 && width >= 0,
              kOp, ": the input shape must be non-negative, got [", batch_size,
              ", ", channels, ", ", height, ", ", width, "]");
  checked_numel({batch_size, channels, height, width}, kOp,
                "grad_input [batch_size, channels, height, width]");
  // No check of the RoI values: the forward made it, and the kernels skip an
  // invalid RoI, so a direct call with bad rois cannot read or write out of
  // bounds either.
  return s;
}

}  // namespace

bool RoIAlignForward::is_max() const {
  return shape.pool_mode == roi_align_detail::kMax;
}

bool RoIAlignBackward::is_max() const {
  return shape.pool_mode == roi_align_detail::kMax;
}

RoIAlignForward roi_align_prepare_forward(const Tensor& input,
                                          const Tensor& rois,
                                          int64_t pooled_height,
                                          int64_t pooled_width,
                                          double spatial_scale,
                                          int64_t sampling_ratio,
                                          host::StringArg pool_mode,
                                          bool aligned) {
  RoIAlignForward f;
  f.shape = check_forward(input, rois, pooled_height, pooled_width,
                          spatial_scale, sampling_ratio, pool_mode, aligned);
  const RoIAlignShape& s = f.shape;
  const ScalarType dtype = host::dtype_of(input);
  const ScalarType compute = roi_compute_dtype(dtype);
  f.input = host::contiguous(input);
  f.rois = host::contiguous(host::to_dtype(rois, compute));
  f.output = host::empty({s.num_rois, s.channels, s.pooled_h, s.pooled_w},
                         dtype, input);
  // Max mode: the chosen sample's (y, x) per value; avg mode: empty [0].
  if (f.is_max()) {
    f.argmax_y = host::empty(
        {s.num_rois, s.channels, s.pooled_h, s.pooled_w}, compute, input);
    f.argmax_x = host::empty(
        {s.num_rois, s.channels, s.pooled_h, s.pooled_w}, compute, input);
  } else {
    f.argmax_y = host::empty({0}, compute, input);
    f.argmax_x = host::empty({0}, compute, input);
  }
  return f;
}

RoIAlignBackward roi_align_prepare_backward(
    const Tensor& grad_output, const Tensor& rois,
    const Tensor& argmax_y, const Tensor& argmax_x,
    int64_t batch_size, int64_t channels, int64_t height, int64_t width,
    double spatial_scale, int64_t sampling_ratio, host::StringArg pool_mode,
    bool aligned, RoIGradLayout layout) {
  const RoIAlignShape shape = check_backward(
      grad_output, rois, argmax_y, argmax_x, batch_size, channels, height,
      width, spatial_scale, sampling_ratio, pool_mode, aligned);
  RoIAlignBackward b{roi_grad_buffers(grad_output, rois, batch_size, channels,
                                      height, width, layout)};
  b.shape = shape;
  b.argmax_y = host::contiguous(argmax_y);
  b.argmax_x = host::contiguous(argmax_x);
  return b;
}

VISDET_LIBRARY_FRAGMENT(m) {
  m.def(
      "roi_align(Tensor input, Tensor rois, SymInt pooled_height, "
      "SymInt pooled_width, float spatial_scale, int sampling_ratio, "
      "str pool_mode, bool aligned) -> (Tensor, Tensor, Tensor)");
  m.def(
      "_roi_align_backward(Tensor grad_output, Tensor rois, Tensor argmax_y, "
      "Tensor argmax_x, SymInt batch_size, SymInt channels, SymInt height, "
      "SymInt width, float spatial_scale, int sampling_ratio, str pool_mode, "
      "bool aligned) -> Tensor");
}

}  // namespace visdet_ops
