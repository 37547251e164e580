// Torch-facing helpers shared by the CPU and CUDA host layers of roi_align.
#pragma once

#include <ATen/core/Tensor.h>

#include <c10/util/string_view.h>

#include "roi_align_launch.h"

namespace visdet_ops {

// Checks the forward arguments and returns the launch shape.
RoIAlignShape roi_align_check_forward(const at::Tensor& input,
                                      const at::Tensor& rois,
                                      int64_t pooled_height,
                                      int64_t pooled_width,
                                      double spatial_scale,
                                      int64_t sampling_ratio,
                                      c10::string_view pool_mode,
                                      bool aligned);

RoIAlignShape roi_align_check_backward(
    const at::Tensor& grad_output, const at::Tensor& rois,
    const at::Tensor& argmax_y, const at::Tensor& argmax_x,
    int64_t batch_size, int64_t channels, int64_t height, int64_t width,
    double spatial_scale, int64_t sampling_ratio, c10::string_view pool_mode,
    bool aligned);

// The forward's outputs, uninitialised: [K, C, PH, PW] values and, in max
// mode, the chosen sample's (y, x) per value; empty [0] tensors in avg mode.
std::tuple<at::Tensor, at::Tensor, at::Tensor> roi_align_empty_outputs(
    const at::Tensor& input, const RoIAlignShape& s);

}  // namespace visdet_ops
