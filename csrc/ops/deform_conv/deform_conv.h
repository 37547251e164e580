// deform_conv: the prepared arguments, the chunked GEMM driver and the
// registered functions shared by the CPU and CUDA host code (the GEMMs through
// ATen: cuBLAS on CUDA). The device layers supply only the im2col / col2im
// kernels and their guard. Written against the
// host adapter (common/host.h): one source for the classic and the stable
// build.
#pragma once

#include <optional>
#include <tuple>

#include "common/host.h"
#include "deform_conv_launch.h"

namespace visdet_ops {

struct DeformConvParams {
  int64_t stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w;
  int64_t groups, deform_groups, im2col_step;
};

// Device kernels on one chunk (tensors are the chunk's slices, contiguous).
struct DeformConvKernels {
  // The kernels read and write float16/bfloat16 (CUDA; they sample and
  // accumulate in float32). Otherwise (CPU: float32 and float64 kernels) a
  // 16-bit call computes through float32 copies and rounds each result once.
  bool reduced_float_kernels;
  // columns: [C * KK, B * OH * OW], fully written.
  void (*im2col)(const host::Tensor& input, const host::Tensor& offset,
                 const std::optional<host::Tensor>& mask,
                 const DeformConvShape& s, const host::Tensor& columns);
  // Number of channel slices col2im splits a deform group into.
  int64_t (*channel_slices)(const DeformConvShape& s);
  // columns: grad_columns [C * KK, B * OH * OW] on entry, overwritten with
  // the columns (what im2col writes) on exit.
  // grad_input: [B, C, H, W] in the accumulation type (+=);
  // grad_offset: [slices, B, 2 * DG * KK, OH * OW], grad_mask: [slices, B,
  // DG * KK, OH * OW] (with a mask only) in the accumulation type, fully
  // written.
  void (*col2im)(const host::Tensor& input, const host::Tensor& offset,
                 const std::optional<host::Tensor>& mask,
                 const host::Tensor& columns, const DeformConvShape& s,
                 int64_t slices, const host::Tensor& grad_input,
                 const host::Tensor& grad_offset,
                 const std::optional<host::Tensor>& grad_mask);
  // Whether col2im overwrites grad_input of chunks of this input (in the
  // kernels' dtype) and shape (batch aside) instead of adding into it;
  // nullptr: never. The backward then leaves grad_input uninitialised.
  bool (*col2im_overwrites)(const host::Tensor& input,
                            const DeformConvShape& s);
  // out [C_out, cols] += bias [C_out] in place, in the kernels' dtype;
  // nullptr: an aten add.
  void (*add_bias)(const host::Tensor& out, const host::Tensor& bias);
  // out (contiguous, the kernels' dtype) = parts [slices, ...out's numel]
  // (accumulation type) summed over the slices; nullptr: an aten sum and copy.
  void (*sum_slices)(const host::Tensor& parts, const host::Tensor& out);
};

// What the forward needs, checked once for every device: the whole-batch
// shape, contiguous inputs in the kernels' dtype and the output.
struct DeformConvForward {
  DeformConvShape shape;  // batch = N
  DeformConvParams params;
  int64_t out_channels = 0;
  host::ScalarType dtype;  // of input, and of the result
  host::Tensor input, offset, weight;
  std::optional<host::Tensor> mask, bias;
  // [N, C_out, OH, OW] in the kernels' dtype, uninitialised; not allocated
  // (undefined) for one image with work to do, whose GEMM result is the
  // output.
  host::Tensor output;
};

DeformConvForward deform_conv_prepare_forward(
    const host::Tensor& input, const host::Tensor& offset,
    const std::optional<host::Tensor>& mask, const host::Tensor& weight,
    const std::optional<host::Tensor>& bias, const DeformConvParams& params,
    const DeformConvKernels& kernels);

// The same plus grad_output (contiguous, in the kernels' dtype) and the
// gradients that the chunks fill in: grad_input (zeroed, accumulation type:
// col2im adds into it), grad_offset and grad_mask (in the kernels' dtype;
// uninitialised when there is work to do, as col2im writes every element,
// else zeroed; grad_mask is an empty [0] tensor without a mask) and
// grad_bias (done: the sum of grad_output; empty [0] without a bias).
struct DeformConvBackward {
  DeformConvForward args;
  host::Tensor grad_output;
  host::Tensor grad_input, grad_offset, grad_mask, grad_bias;
  bool any = false;  // N, C_out and C * KH * KW all nonzero
};

DeformConvBackward deform_conv_prepare_backward(
    const host::Tensor& grad_output, const host::Tensor& input,
    const host::Tensor& offset, const std::optional<host::Tensor>& mask,
    const host::Tensor& weight, const std::optional<host::Tensor>& bias,
    const DeformConvParams& params, const DeformConvKernels& kernels);

host::Tensor deform_conv2d_forward(const DeformConvForward& f,
                                   const DeformConvKernels& kernels);

// (grad_input, grad_offset, grad_mask, grad_weight, grad_bias) in input's
// dtype; grad_mask and grad_bias are empty [0] tensors when there is no
// mask / bias.
std::tuple<host::Tensor, host::Tensor, host::Tensor, host::Tensor,
           host::Tensor>
deform_conv2d_backward(const DeformConvBackward& b,
                       const DeformConvKernels& kernels);

// The registered deform_conv2d and _deform_conv2d_backward of one device, over
// its half of the op: Device::kernels (a constexpr DeformConvKernels) and
// Device::Guard, made for the input around the GEMM driver
// (host::CpuDeviceGuard, host::CudaDeviceGuard). deform_conv_cpu_host.cpp and
// deform_conv_cuda_host.cpp register deform_conv2d_forward_kernel<their
// Device>.
template <typename Device>
host::Tensor deform_conv2d_forward_kernel(
    const host::Tensor& input, const host::Tensor& offset,
    const std::optional<host::Tensor>& mask, const host::Tensor& weight,
    const std::optional<host::Tensor>& bias, int64_t stride_h,
    int64_t stride_w, int64_t pad_h, int64_t pad_w, int64_t dilation_h,
    int64_t dilation_w, int64_t groups, int64_t deform_groups,
    int64_t im2col_step) {
  const DeformConvForward f = deform_conv_prepare_forward(
      input, offset, mask, weight, bias,
      DeformConvParams{stride_h, stride_w, pad_h, pad_w, dilation_h,
                       dilation_w, groups, deform_groups, im2col_step},
      Device::kernels);
  const typename Device::Guard device_guard(input);
  return deform_conv2d_forward(f, Device::kernels);
}

template <typename Device>
std::tuple<host::Tensor, host::Tensor, host::Tensor, host::Tensor,
           host::Tensor>
deform_conv2d_backward_kernel(
    const host::Tensor& grad_output, const host::Tensor& input,
    const host::Tensor& offset, const std::optional<host::Tensor>& mask,
    const host::Tensor& weight, const std::optional<host::Tensor>& bias,
    int64_t stride_h, int64_t stride_w, int64_t pad_h, int64_t pad_w,
    int64_t dilation_h, int64_t dilation_w, int64_t groups,
    int64_t deform_groups, int64_t im2col_step) {
  const DeformConvBackward b = deform_conv_prepare_backward(
      grad_output, input, offset, mask, weight, bias,
      DeformConvParams{stride_h, stride_w, pad_h, pad_w, dilation_h,
                       dilation_w, groups, deform_groups, im2col_step},
      Device::kernels);
  const typename Device::Guard device_guard(input);
  return deform_conv2d_backward(b, Device::kernels);
}

}  // namespace visdet_ops
