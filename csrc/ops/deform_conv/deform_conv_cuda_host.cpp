// deform_conv: CUDA host layer (torch-facing). The GEMM driver is shared with
// the CPU (deform_conv.cpp); this file supplies the CUDA im2col / col2im.
// Device code: deform_conv_cuda.cu.
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/OpMathType.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "common/cuda_types.h"
#include "deform_conv.h"

namespace visdet_ops {
namespace {

DeformConvKernels cuda_kernels() {
  DeformConvKernels k;
  k.im2col = [](const at::Tensor& input, const at::Tensor& offset,
                const at::Tensor& mask, const DeformConvShape& s,
                at::Tensor& columns) {
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    AT_DISPATCH_FLOATING_TYPES_AND2(
        at::kHalf, at::kBFloat16, input.scalar_type(), "deform_conv_im2col_cuda", [&] {
          C10_CUDA_CHECK(deform_conv_im2col_cuda_launch(
              cuda_data_or_null<scalar_t>(input), cuda_data_or_null<scalar_t>(offset),
              cuda_data_or_null<scalar_t>(mask), s,
              cuda_mutable_data<scalar_t>(columns), stream));
        });
  };
  k.channel_slices = [](const DeformConvShape& s) {
    return deform_conv_cuda_channel_slices(s);
  };
  k.col2im = [](const at::Tensor& input, const at::Tensor& offset,
                const at::Tensor& mask, at::Tensor& columns,
                const DeformConvShape& s, int64_t slices,
                at::Tensor& grad_input, at::Tensor& grad_offset,
                at::Tensor& grad_mask) {
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    AT_DISPATCH_FLOATING_TYPES_AND2(
        at::kHalf, at::kBFloat16, input.scalar_type(), "deform_conv_col2im_cuda", [&] {
          using acc_t = at::opmath_type<scalar_t>;
          C10_CUDA_CHECK(deform_conv_col2im_cuda_launch(
              cuda_data_or_null<scalar_t>(input), cuda_data_or_null<scalar_t>(offset),
              cuda_data_or_null<scalar_t>(mask), cuda_mutable_data<scalar_t>(columns),
              s, slices, static_cast<acc_t*>(grad_input.mutable_data_ptr()),
              static_cast<acc_t*>(grad_offset.mutable_data_ptr()),
              mask.defined() ? static_cast<acc_t*>(grad_mask.mutable_data_ptr())
                             : nullptr,
              stream));
        });
  };
  return k;
}

const DeformConvKernels& cuda() {
  static const DeformConvKernels k = cuda_kernels();
  return k;
}

at::Tensor deform_conv2d_forward_cuda(
    const at::Tensor& input, const at::Tensor& offset,
    const std::optional<at::Tensor>& mask, const at::Tensor& weight,
    const std::optional<at::Tensor>& bias, int64_t stride_h, int64_t stride_w,
    int64_t pad_h, int64_t pad_w, int64_t dilation_h, int64_t dilation_w,
    int64_t groups, int64_t deform_groups, int64_t im2col_step) {
  const c10::cuda::CUDAGuard device_guard(input.device());
  const DeformConvArgs a = deform_conv_prepare(
      input, offset, mask, weight, bias,
      DeformConvParams{stride_h, stride_w, pad_h, pad_w, dilation_h,
                       dilation_w, groups, deform_groups, im2col_step});
  return deform_conv_forward_impl(a, cuda());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
deform_conv2d_backward_cuda(
    const at::Tensor& grad_output, const at::Tensor& input,
    const at::Tensor& offset, const std::optional<at::Tensor>& mask,
    const at::Tensor& weight, const std::optional<at::Tensor>& bias,
    int64_t stride_h, int64_t stride_w, int64_t pad_h, int64_t pad_w,
    int64_t dilation_h, int64_t dilation_w, int64_t groups,
    int64_t deform_groups, int64_t im2col_step) {
  const c10::cuda::CUDAGuard device_guard(input.device());
  const DeformConvArgs a = deform_conv_prepare(
      input, offset, mask, weight, bias,
      DeformConvParams{stride_h, stride_w, pad_h, pad_w, dilation_h,
                       dilation_w, groups, deform_groups, im2col_step});
  // grad_input is accumulated with atomicAdd: the summation order, and so
  // the last bits, vary. (grad_offset, grad_mask, grad_weight, grad_bias
  // are deterministic.)
  at::globalContext().alertNotDeterministic(
      "visdet_ops::deform_conv2d backward (CUDA)");
  return deform_conv_backward_impl(grad_output, a, cuda());
}

}  // namespace

TORCH_LIBRARY_IMPL(visdet_ops, CUDA, m) {
  m.impl("deform_conv2d", &deform_conv2d_forward_cuda);
  m.impl("_deform_conv2d_backward", &deform_conv2d_backward_cuda);
}

}  // namespace visdet_ops
