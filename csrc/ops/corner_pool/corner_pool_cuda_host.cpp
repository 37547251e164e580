// corner_pool: CUDA host layer (torch-facing). Device code: corner_pool_cuda.cu.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "corner_pool.h"
#include "common/cuda_types.h"

namespace visdet_ops {
namespace {

at::Tensor corner_pool_forward_cuda_kernel(const at::Tensor& input,
                                           c10::string_view mode) {
  const CornerPoolShape s = corner_pool_shape(input, mode, "input");
  const c10::cuda::CUDAGuard device_guard(input.device());
  const at::Tensor in = input.contiguous();
  at::Tensor output = at::empty_like(in);
  if (in.numel() == 0) return output;
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, in.scalar_type(), "corner_pool_forward_cuda", [&] {
        C10_CUDA_CHECK(corner_pool_forward_cuda_launch(
            cuda_data<scalar_t>(in), s, cuda_mutable_data<scalar_t>(output), stream));
      });
  return output;
}

at::Tensor corner_pool_backward_cuda_kernel(const at::Tensor& grad_output,
                                            const at::Tensor& input,
                                            c10::string_view mode) {
  const CornerPoolShape s = corner_pool_backward_shape(grad_output, input, mode);
  const c10::cuda::CUDAGuard device_guard(input.device());
  const at::Tensor in = input.contiguous();
  const at::Tensor g = grad_output.contiguous();
  at::Tensor grad_input = at::zeros_like(in);
  if (in.numel() == 0) return grad_input;
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, in.scalar_type(), "corner_pool_backward_cuda", [&] {
        C10_CUDA_CHECK(corner_pool_backward_cuda_launch(
            cuda_data<scalar_t>(g), cuda_data<scalar_t>(in), s,
            cuda_mutable_data<scalar_t>(grad_input), stream));
      });
  return grad_input;
}

}  // namespace

TORCH_LIBRARY_IMPL(visdet_ops, CUDA, m) {
  m.impl("corner_pool", &corner_pool_forward_cuda_kernel);
  m.impl("_corner_pool_backward", &corner_pool_backward_cuda_kernel);
}

}  // namespace visdet_ops
