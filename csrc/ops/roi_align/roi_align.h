// Torch-facing helpers shared by the CPU and CUDA host layers of roi_align.
#pragma once

#include <ATen/core/Tensor.h>

#include <c10/util/string_view.h>

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
  at::Tensor input, rois;
  at::Tensor output, argmax_y, argmax_x;
  bool is_max() const;
  std::tuple<at::Tensor, at::Tensor, at::Tensor> outputs() const {
    return {output, argmax_y, argmax_x};
  }
};

RoIAlignForward roi_align_prepare_forward(const at::Tensor& input,
                                          const at::Tensor& rois,
                                          int64_t pooled_height,
                                          int64_t pooled_width,
                                          double spatial_scale,
                                          int64_t sampling_ratio,
                                          c10::string_view pool_mode,
                                          bool aligned);

// The same for the backward: contiguous inputs and a zeroed gradient buffer
// in the compute dtype (grad_accum; the caller converts it to grad_output's
// dtype). RoI values are not checked: the forward did, and the kernels skip
// an invalid RoI anyway.
struct RoIAlignBackward {
  RoIAlignShape shape;
  at::Tensor grad_output, rois, argmax_y, argmax_x;
  at::Tensor grad_accum;
  bool is_max() const;
  at::Tensor grad_input() const;
};

RoIAlignBackward roi_align_prepare_backward(
    const at::Tensor& grad_output, const at::Tensor& rois,
    const at::Tensor& argmax_y, const at::Tensor& argmax_x,
    int64_t batch_size, int64_t channels, int64_t height, int64_t width,
    double spatial_scale, int64_t sampling_ratio, c10::string_view pool_mode,
    bool aligned);

}  // namespace visdet_ops
