// The prepared arguments of roi_align, shared by the CPU and CUDA host layers.
// Written against the host adapter (common/host.h): one source for the
// classic and the stable build.
#pragma once

#include <tuple>

#include "common/host.h"
#include "ops/_rois/rois.h"
#include "roi_align_launch.h"

namespace visdet_ops {

// What a device's forward needs, checked and allocated once for every device:
// the launch shape, contiguous inputs and the uninitialised outputs
// ([K, C, PH, PW] values and, in max mode, the chosen sample's (y, x) per
// value in the compute dtype (float32 for 16-bit input); empty [0] tensors in
// avg mode). RoI values are checked here only where that needs no device
// sync (check_rois_values_nosync).
struct RoIAlignForward {
  RoIAlignShape shape;
  host::Tensor input, rois;
  host::Tensor output, argmax_y, argmax_x;
  bool is_max() const;
  std::tuple<host::Tensor, host::Tensor, host::Tensor> outputs() const {
    return {output, argmax_y, argmax_x};
  }
};

RoIAlignForward roi_align_prepare_forward(const host::Tensor& input,
                                          const host::Tensor& rois,
                                          int64_t pooled_height,
                                          int64_t pooled_width,
                                          double spatial_scale,
                                          int64_t sampling_ratio,
                                          host::StringArg pool_mode,
                                          bool aligned);

// The same for the backward: the RoI ops' gradient buffers (in the layout the
// device's kernels want) and the argmax. RoI values are not checked: the
// forward did, and the kernels skip an invalid RoI anyway.
struct RoIAlignBackward : RoIGradBuffers {
  RoIAlignShape shape;
  host::Tensor argmax_y, argmax_x;
  bool is_max() const;
  RoIAlignGradStrides grad_strides() const {
    return {grad_output.stride(0), grad_output.stride(1),
            grad_output.stride(2), grad_output.stride(3)};
  }
};

RoIAlignBackward roi_align_prepare_backward(
    const host::Tensor& grad_output, const host::Tensor& rois,
    const host::Tensor& argmax_y, const host::Tensor& argmax_x,
    int64_t batch_size, int64_t channels, int64_t height, int64_t width,
    double spatial_scale, int64_t sampling_ratio, host::StringArg pool_mode,
    bool aligned, RoIGradLayout layout);

}  // namespace visdet_ops
