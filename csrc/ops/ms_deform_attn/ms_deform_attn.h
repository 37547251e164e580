// Torch-facing helpers shared by the CPU and CUDA host layers of
// multi_scale_deformable_attn.
#pragma once

#include <ATen/core/Tensor.h>

#include "ms_deform_attn_launch.h"

namespace visdet_ops {

// Checked, contiguous inputs of one call, on the device of value. Validating
// spatial_shapes and level_start_index against num_keys reads them on the
// host: where they live on a GPU, that is one copy of 3 * num_levels int64
// values (a stream sync). With check_device_tables false, tables that live on
// a GPU are not read (no sync): the CUDA kernels bounds-check every level
// against num_keys themselves, so bad tables cannot make them read or write
// out of bounds (the CUDA backward uses this: its forward validated them).
// Tables on the CPU are always validated (no sync) and copied to the device
// without a sync.
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
                        int64_t im2col_step,
                        bool check_device_tables = true);

// The same plus grad_output [B, Q, M * D], for the backward.
MSDAInputs msda_prepare_backward(const at::Tensor& grad_output,
                                 const at::Tensor& value,
                                 const at::Tensor& spatial_shapes,
                                 const at::Tensor& level_start_index,
                                 const at::Tensor& sampling_locations,
                                 const at::Tensor& attention_weights,
                                 int64_t im2col_step,
                                 at::Tensor* grad_output_contiguous,
                                 bool check_device_tables = true);

}  // namespace visdet_ops
