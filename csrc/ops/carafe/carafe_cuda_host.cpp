// carafe / carafe_naive: CUDA host layer (torch-facing, through the host
// adapter). Device code: carafe_cuda.cu (carafe: shared-memory tiled kernels;
// carafe_naive: direct). Both write every element once: deterministic.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <tuple>

#include "carafe.h"
#include "common/host.h"
#include "common/host_cuda.h"

namespace visdet_ops {
namespace {

using host::Tensor;

void check_cuda(const char* op, const Tensor& features) {
  VISDET_CHECK(host::is_cuda(features), op,
               ": features must be a CUDA tensor, got ",
               host::device_of(features));
}

Tensor forward_cuda(const char* op, bool tiled, const Tensor& features,
                    const Tensor& masks, int64_t kernel_size,
                    int64_t group_size, int64_t scale_factor) {
  const CarafeForward f = carafe_prepare_forward(
      op, features, masks, kernel_size, group_size, scale_factor);
  check_cuda(op, features);
  if (f.output.numel() == 0) return f.output;
  const host::CudaDeviceGuard device_guard(features);
  const cudaStream_t stream = host::current_cuda_stream(features);
  host::dispatch_floating_types<__half, __nv_bfloat16>(
      host::dtype_of(features), "carafe_forward_cuda", [&](auto tag) {
        using T = typename decltype(tag)::type;
        VISDET_CUDA_CHECK(carafe_forward_cuda_launch<T>(
            host::const_data<T>(f.features), host::const_data<T>(f.masks),
            f.shape, tiled, host::mutable_data<T>(f.output), stream));
      });
  return f.output;
}

std::tuple<Tensor, Tensor> backward_cuda(const char* op, bool tiled,
                                         const Tensor& grad_output,
                                         const Tensor& features,
                                         const Tensor& masks,
                                         int64_t kernel_size,
                                         int64_t group_size,
                                         int64_t scale_factor) {
  const CarafeBackward b =
      carafe_prepare_backward(op, grad_output, features, masks, kernel_size,
                              group_size, scale_factor);
  check_cuda(op, features);
  const host::CudaDeviceGuard device_guard(features);
  const cudaStream_t stream = host::current_cuda_stream(features);
  host::dispatch_floating_types<__half, __nv_bfloat16>(
      host::dtype_of(features), "carafe_backward_cuda", [&](auto tag) {
        using T = typename decltype(tag)::type;
        VISDET_CUDA_CHECK(carafe_backward_cuda_launch<T>(
            host::const_data<T>(b.grad_output),
            host::const_data<T>(b.features), host::const_data<T>(b.masks),
            b.shape, tiled, host::mutable_data<T>(b.grad_features),
            host::mutable_data<T>(b.grad_masks), stream));
      });
  return b.outputs();
}

Tensor carafe_forward_cuda_kernel(const Tensor& features, const Tensor& masks,
                                  int64_t k, int64_t g, int64_t s) {
  return forward_cuda("carafe", true, features, masks, k, g, s);
}
Tensor carafe_naive_forward_cuda_kernel(const Tensor& features,
                                        const Tensor& masks, int64_t k,
                                        int64_t g, int64_t s) {
  return forward_cuda("carafe_naive", false, features, masks, k, g, s);
}
std::tuple<Tensor, Tensor> carafe_backward_cuda_kernel(
    const Tensor& grad_output, const Tensor& features, const Tensor& masks,
    int64_t k, int64_t g, int64_t s) {
  return backward_cuda("carafe", true, grad_output, features, masks, k, g, s);
}
std::tuple<Tensor, Tensor> carafe_naive_backward_cuda_kernel(
    const Tensor& grad_output, const Tensor& features, const Tensor& masks,
    int64_t k, int64_t g, int64_t s) {
  return backward_cuda("carafe_naive", false, grad_output, features, masks, k,
                       g, s);
}

}  // namespace

VISDET_LIBRARY_IMPL(CUDA, m) {
  m.impl("carafe", VISDET_KERNEL(carafe_forward_cuda_kernel));
  m.impl("_carafe_backward", VISDET_KERNEL(carafe_backward_cuda_kernel));
  m.impl("carafe_naive", VISDET_KERNEL(carafe_naive_forward_cuda_kernel));
  m.impl("_carafe_naive_backward",
         VISDET_KERNEL(carafe_naive_backward_cuda_kernel));
}

}  // namespace visdet_ops
