// roi_align_rotated: schema, and the argument checks and prepare steps shared
// by all devices. Each device registers from its own host file:
// roi_align_rotated_cpu_host.cpp and roi_align_rotated_cuda_host.cpp. One
// source for the classic and the stable build (common/host.h). Autograd,
// autocast and the CUDA backward's determinism alert are registered in
// visdet_ops/ops/roi_align_rotated.py.
#include "common/checks.h"
#include "common/host.h"
#include "ops/_rois/rois.h"
#include "ops/_rois/rois_kernel.h"
#include "roi_align_rotated.h"

namespace visdet_ops {
namespace {

using host::ScalarType;
using host::Tensor;

constexpr const char* kOp = "roi_align_rotated";

RoIAlignRotatedShape check_forward(const Tensor& input, const Tensor& rois,
                                   int64_t pooled_height, int64_t pooled_width,
                                   double spatial_scale,
                                   int64_t sampling_ratio, bool aligned,
                                   bool clockwise) {
  check_dim(input, 4, kOp, "input");
  check_rois_shape(rois, kRotatedRoIColumns, kOp);
  check_floating(input, kOp, "input");
  check_rois_dtype(input, rois, kOp, "input");
  check_same_device(input, rois, kOp, "input", "rois");
  check_output_size_and_scale(pooled_height, pooled_width, spatial_scale,
                              kOp);
  check_roi_output_size(input, rois, pooled_height, pooled_width, kOp);
  check_sampling_ratio(sampling_ratio, kOp);
  RoIAlignRotatedShape s{input.size(0), rois.size(0),   input.size(1),
                         input.size(2), input.size(3),  pooled_height,
                         pooled_width,  sampling_ratio, aligned,
                         clockwise};
  VISDET_CHECK(rois.size(0) == 0 || (s.height > 0 && s.width > 0), kOp,
               ": input must have a non-empty spatial size, got shape ",
               host::shape_of(input));
  // In the compute dtype, which the CPU check reads (16-bit RoIs widen exactly).
  check_rois_values_nosync(
      host::to_dtype(rois, roi_compute_dtype(host::dtype_of(input))),
      input.size(0), kOp);
  return s;
}

RoIAlignRotatedShape check_backward(const Tensor& grad_output,
                                    const Tensor& rois, int64_t batch_size,
                                    int64_t channels, int64_t height,
                                    int64_t width, double spatial_scale,
                                    int64_t sampling_ratio, bool aligned,
                                    bool clockwise) {
  check_rois_shape(rois, kRotatedRoIColumns, kOp);
  check_dim(grad_output, 4, kOp, "grad_output");
  check_floating(grad_output, kOp, "grad_output");
  check_rois_dtype(grad_output, rois, kOp, "grad_output");
  check_same_device(grad_output, rois, kOp, "grad_output", "rois");
  check_output_size_and_scale(grad_output.size(2), grad_output.size(3),
                              spatial_scale, kOp);
  check_sampling_ratio(sampling_ratio, kOp);
  RoIAlignRotatedShape s{batch_size,          rois.size(0),   channels,
                         height,              width,          grad_output.size(2),
                         grad_output.size(3), sampling_ratio, aligned,
                         clockwise};
  VISDET_CHECK(
      grad_output.size(0) == s.num_rois && grad_output.size(1) == channels,
      kOp, ": grad_output must have shape [", s.num_rois, ", ", channels,
      ", PH, PW], got ", host::shape_of(grad_output));
  VISDET_CHECK(batch_size >= 0 && channels >= 0 && height >= 0 && width >= 0,
               kOp, ": the input shape must be non-negative, got [",
               batch_size, ", ", channels, ", ", height, ", ", width, "]");
  checked_numel({batch_size, channels, height, width}, kOp,
                "grad_input [batch_size, channels, height, width]");
  VISDET_CHECK(s.num_rois == 0 || s.output_numel() == 0 ||
                   (height > 0 && width > 0),
               kOp, ": the input must have a non-empty spatial size, got [",
               batch_size, ", ", channels, ", ", height, ", ", width, "]");
  // No check of the RoI values: the forward made it, and the kernels skip an
  // invalid RoI, so a direct call with bad rois cannot read or write out of
  // bounds either.
  return s;
}

}  // namespace

RoIAlignRotatedForward roi_align_rotated_prepare_forward(
    const Tensor& input, const Tensor& rois, int64_t pooled_height,
    int64_t pooled_width, double spatial_scale, int64_t sampling_ratio,
    bool aligned, bool clockwise) {
  RoIAlignRotatedForward f;
  f.shape = check_forward(input, rois, pooled_height, pooled_width,
                          spatial_scale, sampling_ratio, aligned, clockwise);
  const RoIAlignRotatedShape& s = f.shape;
  const ScalarType dtype = host::dtype_of(input);
  f.input = host::contiguous(input);
  f.rois = host::contiguous(host::to_dtype(rois, roi_compute_dtype(dtype)));
  f.output = host::empty({s.num_rois, s.channels, s.pooled_h, s.pooled_w},
                         dtype, input);
  return f;
}

RoIAlignRotatedBackward roi_align_rotated_prepare_backward(
    const Tensor& grad_output, const Tensor& rois, int64_t batch_size,
    int64_t channels, int64_t height, int64_t width, double spatial_scale,
    int64_t sampling_ratio, bool aligned, bool clockwise,
    RoIGradLayout layout) {
  const RoIAlignRotatedShape shape =
      check_backward(grad_output, rois, batch_size, channels, height, width,
                     spatial_scale, sampling_ratio, aligned, clockwise);
  RoIAlignRotatedBackward b{roi_grad_buffers(grad_output, rois, batch_size,
                                             channels, height, width, layout)};
  b.shape = shape;
  return b;
}

VISDET_LIBRARY_FRAGMENT(m) {
  m.def(
      "roi_align_rotated(Tensor input, Tensor rois, SymInt pooled_height, "
      "SymInt pooled_width, float spatial_scale, int sampling_ratio, "
      "bool aligned, bool clockwise) -> Tensor");
  m.def(
      "_roi_align_rotated_backward(Tensor grad_output, Tensor rois, "
      "SymInt batch_size, SymInt channels, SymInt height, SymInt width, "
      "float spatial_scale, int sampling_ratio, bool aligned, "
      "bool clockwise) -> Tensor");
}

}  // namespace visdet_ops
