// Torch-facing masked_conv2d: one implementation for every device (checks,
// the active positions, the GEMMs through ATen) over per-device gathers.
#pragma once

#include <ATen/core/Tensor.h>

#include <tuple>

#include "masked_conv_launch.h"

namespace visdet_ops {

// The device part: three gathers/scatters, each writing its output tensor.
struct MaskedConvDevice {
  // cols [P, K] (float32 for 16-bit features, else features' dtype).
  void (*im2col)(const at::Tensor& input, const at::Tensor& idx,
                 const MaskedConvGeometry& g, at::Tensor& cols);
  // output (zeroed) [N, C_out, H_out, W_out] from rows [P, C_out].
  void (*col2im)(const at::Tensor& rows, const at::Tensor& idx,
                 at::Tensor& output);
  // grad_input [N, C, H, W] (every element written) from grad_cols [P, K].
  void (*grad_input)(const at::Tensor& grad_cols, const at::Tensor& pos_map,
                     const MaskedConvGeometry& g, at::Tensor& grad_input);
};

at::Tensor masked_conv2d_forward_impl(const at::Tensor& features,
                                      const at::Tensor& mask,
                                      const at::Tensor& weight,
                                      const std::optional<at::Tensor>& bias,
                                      int64_t pad_h, int64_t pad_w,
                                      const MaskedConvDevice& device);

std::tuple<at::Tensor, at::Tensor, at::Tensor> masked_conv2d_backward_impl(
    const at::Tensor& grad_output, const at::Tensor& features,
    const at::Tensor& mask, const at::Tensor& weight, int64_t pad_h,
    int64_t pad_w, const MaskedConvDevice& device);

}  // namespace visdet_ops
