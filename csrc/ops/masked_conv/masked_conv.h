// masked_conv2d: the prepared arguments, the device-independent driver (the
// GEMMs through ATen) over per-device gathers and scatters, and the registered
// functions of each device over them. Written
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

// The registered masked_conv2d and _masked_conv2d_backward of one device, over
// its half of the op: Device::kernels (a constexpr MaskedConvDevice),
// Device::check_device(features) (that the device can run the call; the
// dispatcher picks CUDA when any argument is on a GPU) and Device::Guard, made
// for features around the prepare step and the driver (host::CpuDeviceGuard,
// host::CudaDeviceGuard). masked_conv_cpu_host.cpp and
// masked_conv_cuda_host.cpp register masked_conv2d_kernel<their Device>.
template <typename Device>
host::Tensor masked_conv2d_kernel(const host::Tensor& features,
                                  const host::Tensor& mask,
                                  const host::Tensor& weight,
                                  const std::optional<host::Tensor>& bias,
                                  int64_t pad_h, int64_t pad_w) {
  Device::check_device(features);
  const typename Device::Guard device_guard(features);
  const MaskedConvForward f = masked_conv_prepare_forward(
      features, mask, weight, bias, pad_h, pad_w, Device::kernels);
  return masked_conv2d_forward(f, Device::kernels);
}

template <typename Device>
std::tuple<host::Tensor, host::Tensor, host::Tensor>
masked_conv2d_backward_kernel(const host::Tensor& grad_output,
                              const host::Tensor& features,
                              const host::Tensor& mask,
                              const host::Tensor& weight, int64_t pad_h,
                              int64_t pad_w) {
  Device::check_device(features);
  const typename Device::Guard device_guard(features);
  const MaskedConvBackward b = masked_conv_prepare_backward(
      grad_output, features, mask, weight, pad_h, pad_w, Device::kernels);
  return masked_conv2d_backward(b, Device::kernels);
}

}  // namespace visdet_ops
