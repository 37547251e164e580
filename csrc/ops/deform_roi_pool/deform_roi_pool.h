// Torch-facing helpers shared by the CPU and CUDA host layers of
// deform_roi_pool.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>

#include "deform_roi_pool_launch.h"

namespace visdet_ops {

// What a device's forward needs, checked and allocated once for every
// device: the launch shape, contiguous inputs (rois in the compute dtype:
// float32 for float16/bfloat16 input, else input's dtype; offset undefined
// when absent) and the uninitialised [K, C, PH, PW] output.
struct DeformRoIPoolForward {
  DeformRoIPoolShape shape;
  at::Tensor input, rois, offset;
  at::Tensor output;
};

DeformRoIPoolForward deform_roi_pool_prepare_forward(
    const at::Tensor& input, const at::Tensor& rois,
    const std::optional<at::Tensor>& offset, int64_t pooled_height,
    int64_t pooled_width, double spatial_scale, int64_t sampling_ratio,
    double gamma);

// The same for the backward: contiguous inputs, grad_input zeroed in the
// compute dtype (float32 accumulation for 16-bit inputs; the caller converts)
// and grad_offset uninitialised ([K, 2, PH, PW], or [0] without offset).
struct DeformRoIPoolBackward {
  DeformRoIPoolShape shape;
  at::Tensor grad_output, input, rois, offset;
  at::Tensor grad_input, grad_offset;
  std::tuple<at::Tensor, at::Tensor> outputs() const;
};

DeformRoIPoolBackward deform_roi_pool_prepare_backward(
    const at::Tensor& grad_output, const at::Tensor& input,
    const at::Tensor& rois, const std::optional<at::Tensor>& offset,
    double spatial_scale, int64_t sampling_ratio, double gamma);

}  // namespace visdet_ops
