// masked_conv2d: the prepared arguments and the device-independent driver
// (the GEMMs through ATen) over per-device gathers and scatters. Written
// against the host adapter (common/host.h): one source for the classic and
// the stable build.
#pragma once

#include <optional>
#include <tuple>

#include "common/host.h"
#include "masked_conv_launch.h"

namespace visdet_ops {

// The device part: three gathers/scatters, each writing its output tensor.
struct MaskedConvDevice {
  // The kernels read and write float16/bfloat16 (CUDA; their columns are
  // float32). Otherwise (CPU: float32 and float64 kernels) a 16-bit call
  // computes through float32 copies and rounds each result once.
  bool reduced_float_kernels;
  // cols [P, K] (float32 for 16-bit input, else input's dtype).
  void (*im2col)(const host::Tensor& input, const host::Tensor& idx,
                 const MaskedConvGeometry& g, const host::Tensor& cols);
  // output (zeroed) [N, C_out, H_out, W_out] from rows [P, C_out].
  void (*col2im)(const host::Tensor& rows, const host::Tensor& idx,
                 const host::Tensor& output);
  // grad_input [N, C, H, W] (every element written) from grad_cols [P, K].
  void (*grad_input)(const host::Tensor& grad_cols,
                     const host::Tensor& pos_map, const MaskedConvGeometry& g,
                     const host::Tensor& grad_input);
};

// What the forward needs, checked and allocated once for every device. With
// no active position (num_pos == 0) the output is all zeros and only
// `output` is set.
struct MaskedConvForward {
  MaskedConvGeometry geometry;  // of features' windows
  int64_t out_channels = 0, num_pos = 0;
  host::ScalarType dtype;       // of features, and of the result
  host::Tensor idx;             // [P, 3] active positions (n, h, w)
  host::Tensor features;        // contiguous, in the kernels' dtype
  host::Tensor weight;          // [C_out, K] in the column dtype
  std::optional<host::Tensor> bias;  // [C_out] in the column dtype
  host::Tensor output;          // zeroed, in the kernels' dtype
  host::Tensor result() const { return host::to_dtype(output, dtype); }
};

MaskedConvForward masked_conv_prepare_forward(
    const host::Tensor& features, const host::Tensor& mask,
    const host::Tensor& weight, const std::optional<host::Tensor>& bias,
    int64_t pad_h, int64_t pad_w, const MaskedConvDevice& device);

// The same for the backward. With num_pos == 0 every gradient is zero:
// grad_input, zero_grad_weight and zero_grad_bias hold the zeros (in
// features' dtype) and the inputs are not set.
struct MaskedConvBackward {
  MaskedConvGeometry geometry;       // of features' windows
  MaskedConvGeometry grad_geometry;  // grad_output at the positions (1x1)
  int64_t batch = 0, in_channels = 0, height = 0, width = 0;
  int64_t out_channels = 0, kh = 0, kw = 0, num_pos = 0;
  host::ScalarType dtype;  // of features, and of every gradient
  host::Tensor active;     // bool [N, map_h, map_w]: the positions
  host::Tensor idx;        // [P, 3] (n, h, w), nonzero(active)
  host::Tensor grad_output, features;  // contiguous, in the kernels' dtype
  host::Tensor weight;     // [C_out, K] in the column dtype
  host::Tensor grad_input;  // uninitialised [N, C, H, W], kernels' dtype
  host::Tensor zero_grad_weight, zero_grad_bias;  // num_pos == 0 only
};

MaskedConvBackward masked_conv_prepare_backward(
    const host::Tensor& grad_output, const host::Tensor& features,
    const host::Tensor& mask, const host::Tensor& weight, int64_t pad_h,
    int64_t pad_w, const MaskedConvDevice& device);

host::Tensor masked_conv2d_forward(const MaskedConvForward& f,
                                   const MaskedConvDevice& device);

// (grad_features, grad_weight, grad_bias) in features' dtype.
std::tuple<host::Tensor, host::Tensor, host::Tensor> masked_conv2d_backward(
    const MaskedConvBackward& b, const MaskedConvDevice& device);

}  // namespace visdet_ops
