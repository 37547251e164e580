// Torch-facing helpers shared by the CPU and CUDA host layers of carafe and
// carafe_naive.
#pragma once

#include <ATen/core/Tensor.h>

#include "carafe_launch.h"

namespace visdet_ops {

// Checks (op names carafe or carafe_naive) features [N, C, H, W] and masks
// [N, G*K*K, H*S, W*S] and the sizes; returns the shape.
CarafeShape carafe_check(const char* op, const at::Tensor& features,
                         const at::Tensor& masks, int64_t kernel_size,
                         int64_t group_size, int64_t scale_factor);

// The same plus grad_output [N, C, H*S, W*S].
CarafeShape carafe_check_backward(const char* op, const at::Tensor& grad_output,
                                  const at::Tensor& features,
                                  const at::Tensor& masks, int64_t kernel_size,
                                  int64_t group_size, int64_t scale_factor);

}  // namespace visdet_ops
