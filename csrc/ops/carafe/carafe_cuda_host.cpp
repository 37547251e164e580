// carafe / carafe_naive: CUDA host layer (torch-facing). Device code:
// carafe_cuda.cu (carafe: shared-memory tiled kernels; carafe_naive: direct).
#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "carafe.h"
#include "common/cuda_types.h"

namespace visdet_ops {
namespace {

at::Tensor forward_cuda(const char* op, bool tiled, const at::Tensor& features,
                        const at::Tensor& masks, int64_t kernel_size, int64_t group_size,
                        int64_t scale_factor) {
  const CarafeShape s =
      carafe_check(op, features, masks, kernel_size, group_size, scale_factor);
  TORCH_CHECK(features.is_cuda(), op, ": features must be a CUDA tensor, got ",
              features.device());
  const c10::cuda::CUDAGuard device_guard(features.device());
  const at::Tensor f = features.contiguous(), m = masks.contiguous();
  at::Tensor output = at::empty({s.batch, s.channels, s.out_h(), s.out_w()}, f.options());
  if (output.numel() == 0) return output;
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, f.scalar_type(),
                                  "carafe_forward_cuda", [&] {
    const cudaError_t err = carafe_forward_cuda_launch(
        cuda_data<scalar_t>(f), cuda_data<scalar_t>(m), s, tiled,
        cuda_mutable_data<scalar_t>(output), stream);
    C10_CUDA_CHECK(err);
  });
  return output;
}

std::tuple<at::Tensor, at::Tensor> backward_cuda(const char* op, bool tiled,
                                                 const at::Tensor& grad_output,
                                                 const at::Tensor& features,
                                                 const at::Tensor& masks, int64_t kernel_size,
                                                 int64_t group_size, int64_t scale_factor) {
  const CarafeShape s = carafe_check_backward(op, grad_output, features, masks, kernel_size,
                                              group_size, scale_factor);
  TORCH_CHECK(features.is_cuda(), op, ": features must be a CUDA tensor, got ",
              features.device());
  const c10::cuda::CUDAGuard device_guard(features.device());
  const at::Tensor g = grad_output.contiguous(), f = features.contiguous(),
                   m = masks.contiguous();
  at::Tensor grad_features = at::empty(f.sizes(), f.options());
  at::Tensor grad_masks = at::empty(m.sizes(), m.options());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, f.scalar_type(),
                                  "carafe_backward_cuda", [&] {
    const cudaError_t err = carafe_backward_cuda_launch(
        cuda_data<scalar_t>(g), cuda_data<scalar_t>(f), cuda_data<scalar_t>(m), s, tiled,
        cuda_mutable_data<scalar_t>(grad_features), cuda_mutable_data<scalar_t>(grad_masks), stream);
    C10_CUDA_CHECK(err);
  });
  return {grad_features, grad_masks};
}

at::Tensor carafe_forward_cuda_kernel(const at::Tensor& features, const at::Tensor& masks,
                                      int64_t k, int64_t g, int64_t s) {
  return forward_cuda("carafe", true, features, masks, k, g, s);
}
at::Tensor carafe_naive_forward_cuda_kernel(const at::Tensor& features,
                                            const at::Tensor& masks, int64_t k, int64_t g,
                                            int64_t s) {
  return forward_cuda("carafe_naive", false, features, masks, k, g, s);
}
std::tuple<at::Tensor, at::Tensor> carafe_backward_cuda_kernel(
    const at::Tensor& grad_output, const at::Tensor& features, const at::Tensor& masks,
    int64_t k, int64_t g, int64_t s) {
  return backward_cuda("carafe", true, grad_output, features, masks, k, g, s);
}
std::tuple<at::Tensor, at::Tensor> carafe_naive_backward_cuda_kernel(
    const at::Tensor& grad_output, const at::Tensor& features, const at::Tensor& masks,
    int64_t k, int64_t g, int64_t s) {
  return backward_cuda("carafe_naive", false, grad_output, features, masks, k, g, s);
}

}  // namespace

TORCH_LIBRARY_IMPL(visdet_ops, CUDA, m) {
  m.impl("carafe", &carafe_forward_cuda_kernel);
  m.impl("_carafe_backward", &carafe_backward_cuda_kernel);
  m.impl("carafe_naive", &carafe_naive_forward_cuda_kernel);
  m.impl("_carafe_naive_backward", &carafe_naive_backward_cuda_kernel);
}

}  // namespace visdet_ops
