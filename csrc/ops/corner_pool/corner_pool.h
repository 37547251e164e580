// Torch-facing helpers shared by the CPU and CUDA host layers of corner_pool.
#pragma once

#include <ATen/core/Tensor.h>

#include <c10/util/string_view.h>

#include "corner_pool_launch.h"

namespace visdet_ops {

// Checks input ([N, C, H, W], floating) and mode ('top', 'bottom', 'left',
// 'right') and returns the lane view of the scan.
CornerPoolShape corner_pool_shape(const at::Tensor& input,
                                  c10::string_view mode, const char* arg);

// The same for the backward; grad_output must have input's shape, dtype and
// device.
CornerPoolShape corner_pool_backward_shape(const at::Tensor& grad_output,
                                           const at::Tensor& input,
                                           c10::string_view mode);

}  // namespace visdet_ops
