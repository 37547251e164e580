// The prepared arguments of corner_pool, shared by the CPU and CUDA host
// layers. Written against the host adapter (common/host.h): one source for the
// classic and the stable build.
#pragma once

#include "common/host.h"
#include "corner_pool_launch.h"

namespace visdet_ops {

// What a device's forward needs, checked and allocated once: the lane view of
// the scan, the contiguous input in the compute dtype and the uninitialised
// output in it; result() gives the output in the input's dtype.
struct CornerPoolForward {
  CornerPoolShape shape;
  host::ScalarType dtype;  // the input's: the dtype of the result
  host::Tensor input, output;
  host::Tensor result() const;
};

// Checks input ([N, C, H, W], floating) and mode ('top', 'bottom', 'left',
// 'right'). widen_16bit: float16 / bfloat16 are computed in float32 (the CPU
// kernels; a max, so exact); else in their own dtype (CUDA).
CornerPoolForward corner_pool_prepare_forward(const host::Tensor& input,
                                              host::StringArg mode,
                                              bool widen_16bit);

// The same for the backward (grad_output must have input's shape, dtype and
// device), with a zeroed grad_input buffer in the compute dtype.
struct CornerPoolBackward {
  CornerPoolShape shape;
  host::ScalarType dtype;  // the input's: the dtype of the result
  host::Tensor grad_output, input, grad_input;
  host::Tensor result() const;
};

CornerPoolBackward corner_pool_prepare_backward(const host::Tensor& grad_output,
                                                const host::Tensor& input,
                                                host::StringArg mode,
                                                bool widen_16bit);

}  // namespace visdet_ops
