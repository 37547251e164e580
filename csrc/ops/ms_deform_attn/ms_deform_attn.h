// Torch-facing helpers shared by the CPU and CUDA host layers of
// multi_scale_deformable_attn.
#pragma once

#include <ATen/core/Tensor.h>

#include "ms_deform_attn_launch.h"

namespace visdet_ops {

// Checked, contiguous inputs of one call, on the device of value. Validating
// spatial_shapes and level_start_index against num_keys reads them on the
// host: where they live on a GPU, that is one copy of 3 * num_levels int64
// values (a stream sync).
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
