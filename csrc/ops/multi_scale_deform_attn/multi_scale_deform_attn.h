// The prepared arguments of multi_scale_deformable_attn, shared by the CPU and
// CUDA host layers. Written against the host adapter (common/host.h): one
// source for the classic and the stable build.
#pragma once

#include <tuple>

#include "common/host.h"
#include "multi_scale_deform_attn_launch.h"

namespace visdet_ops {

// Checked, contiguous inputs of one call, on the device of value, and the
// uninitialised output [B, Q, M * D] in value's dtype. Tables on the CPU are
// always validated against num_keys (no sync) and copied to the device without
// a sync. Tables that live on a GPU are validated only with
// VISDET_OPS_SYNC_CHECKS=1 or VISDET_OPS_SYNC_LEVEL_CHECKS=1 (reading them is
// a device-to-host wait, which the Deformable DETR decoder paid on every
// call): otherwise the CUDA kernels bounds-check every level against num_keys
// themselves, so bad tables cannot make them read or write out of bounds (a
// bad level gives NaN output and no gradient). sampling_locations and
// attention_weights are in value's compute dtype (float32 for 16-bit value).
struct MSDAForward {
  MSDAShape shape;
  host::Tensor value, spatial_shapes, level_start_index, sampling_locations,
      attention_weights;
  host::Tensor output;
};

MSDAForward msda_prepare_forward(const host::Tensor& value,
                                 const host::Tensor& spatial_shapes,
                                 const host::Tensor& level_start_index,
                                 const host::Tensor& sampling_locations,
                                 const host::Tensor& attention_weights,
                                 int64_t im2col_step);

// The same inputs plus a contiguous grad_output [B, Q, M * D], and zeroed
// gradient buffers in value's compute dtype (float32 for the 16-bit types:
// the CUDA kernel accumulates grad_value with atomicAdd); grads() returns
// each gradient in its argument's dtype (rounded once).
struct MSDABackward {
  MSDAShape shape;
  host::Tensor grad_output, value, spatial_shapes, level_start_index,
      sampling_locations, attention_weights;
  host::Tensor grad_value, grad_sampling_locations, grad_attention_weights;
  host::ScalarType value_dtype, sampling_locations_dtype,
      attention_weights_dtype;
  std::tuple<host::Tensor, host::Tensor, host::Tensor> grads() const;
};

MSDABackward msda_prepare_backward(const host::Tensor& grad_output,
                                   const host::Tensor& value,
                                   const host::Tensor& spatial_shapes,
                                   const host::Tensor& level_start_index,
                                   const host::Tensor& sampling_locations,
                                   const host::Tensor& attention_weights,
                                   int64_t im2col_step);

}  // namespace visdet_ops
