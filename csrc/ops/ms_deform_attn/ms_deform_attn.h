// Torch-facing helpers shared by the CPU and CUDA host layers of
// multi_scale_deformable_attn.
#pragma once

#include <ATen/core/Tensor.h>

#include "ms_deform_attn_launch.h"

namespace visdet_ops {

// Checked, contiguous inputs of one call, on the device of value. Tables on
// the CPU are always validated against num_keys (no sync) and copied to the
// device without a sync. Tables that live on a GPU are validated only with
// VISDET_OPS_SYNC_CHECKS=1 or VISDET_OPS_SYNC_LEVEL_CHECKS=1 (reading them is
// a device-to-host wait, which the Deformable DETR decoder paid on every
// call): otherwise the CUDA kernels bounds-check every level against num_keys
// themselves, so bad tables cannot make them read or write out of bounds (a
// bad level gives NaN output and no gradient).
struct MSDAInputs {
  MSDAShape shape;
  at::Tensor value, spatial_shapes, level_start_index, sampling_locations,
      attention_weights;
};

MSDAInputs msda_prepare(const at::Tensor& value,
                        const at::Tensor& spatial_shapes,
                        const at::Tensor& level_start_index,
                        const at::Tensor& sampling_locations,
                        const at::Tensor& attention_weights,
                        int64_t im2col_step);

// The same plus grad_output [B, Q, M * D], for the backward.
MSDAInputs msda_prepare_backward(const at::Tensor& grad_output,
                                 const at::Tensor& value,
                                 const at::Tensor& spatial_shapes,
                                 const at::Tensor& level_start_index,
                                 const at::Tensor& sampling_locations,
                                 const at::Tensor& attention_weights,
                                 int64_t im2col_step,
                                 at::Tensor* grad_output_contiguous);

}  // namespace visdet_ops
