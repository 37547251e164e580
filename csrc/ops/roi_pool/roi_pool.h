// Torch-facing helpers shared by the CPU and CUDA host layers of roi_pool.
#pragma once

#include <ATen/core/Tensor.h>

#include "roi_pool_launch.h"

namespace visdet_ops {

// What a device's forward needs, checked and allocated once for every device:
// the launch shape, contiguous inputs and the uninitialised outputs
// ([K, C, PH, PW] values and int32 argmax). RoI values are checked here only
// where that needs no device sync (check_rois_values_nosync).
struct RoIPoolForward {
  RoIPoolShape shape;
  at::Tensor input, rois;
  at::Tensor output, argmax;
  std::tuple<at::Tensor, at::Tensor> outputs() const { return {output, argmax}; }
};

RoIPoolForward roi_pool_prepare_forward(const at::Tensor& input,
                                        const at::Tensor& rois,
                                        int64_t pooled_height,
                                        int64_t pooled_width,
                                        double spatial_scale);

// The same for the backward: contiguous inputs and a zeroed gradient buffer
// in the compute dtype (grad_accum; grad_input() converts it to grad_output's
// dtype). RoI values are not checked: the forward did, and the kernels skip
// an invalid RoI or argmax anyway.
struct RoIPoolBackward {
  RoIPoolShape shape;
  at::Tensor grad_output, rois, argmax;
  at::Tensor grad_accum;
  at::Tensor grad_input() const;
};

RoIPoolBackward roi_pool_prepare_backward(const at::Tensor& grad_output,
                                          const at::Tensor& rois,
                                          const at::Tensor& argmax,
                                          int64_t batch_size, int64_t channels,
                                          int64_t height, int64_t width);

}  // namespace visdet_ops
