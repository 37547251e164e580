// The prepared arguments of roi_align_rotated, shared by the CPU and CUDA host
// layers. Written against the host adapter (common/host.h): one source for
// the classic and the stable build.
#pragma once

#include "common/host.h"
#include "ops/_rois/rois.h"
#include "roi_align_rotated_launch.h"

namespace visdet_ops {

// What a device's forward needs, checked and allocated once for every device:
// the launch shape, contiguous inputs (rois in the compute dtype) and the
// uninitialised output [K, C, PH, PW]. RoI values are checked here only where
// that needs no device sync (check_rois_values_nosync).
struct RoIAlignRotatedForward {
  RoIAlignRotatedShape shape;
  host::Tensor input, rois;
  host::Tensor output;
};

RoIAlignRotatedForward roi_align_rotated_prepare_forward(
    const host::Tensor& input, const host::Tensor& rois, int64_t pooled_height,
    int64_t pooled_width, double spatial_scale, int64_t sampling_ratio,
    bool aligned, bool clockwise);

// The same for the backward: the RoI ops' gradient buffers, in the layout the
// device's kernels want (RoIGradLayout). RoI values are not checked: the
// forward did, and the kernels skip an invalid RoI anyway.
struct RoIAlignRotatedBackward : RoIGradBuffers {
  RoIAlignRotatedShape shape;
  RoIAlignRotatedGradStrides grad_strides() const {
    return {grad_output.stride(0), grad_output.stride(1),
            grad_output.stride(2), grad_output.stride(3)};
  }
};

RoIAlignRotatedBackward roi_align_rotated_prepare_backward(
    const host::Tensor& grad_output, const host::Tensor& rois,
    int64_t batch_size, int64_t channels, int64_t height, int64_t width,
    double spatial_scale, int64_t sampling_ratio, bool aligned, bool clockwise,
    RoIGradLayout layout);

}  // namespace visdet_ops
