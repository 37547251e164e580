// corner_pool: CUDA host layer (torch-facing, through the host adapter).
// Device code: corner_pool_cuda.cu.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/host.h"
#include "common/host_cuda.h"
#include "corner_pool.h"

namespace visdet_ops {
namespace {

using host::Tensor;

Tensor corner_pool_forward_cuda_kernel(const Tensor& input,
                                       host::StringArg mode) {
  const host::CudaDeviceGuard device_guard(input);
  // float16 / bfloat16 are read directly (compared in float).
  const CornerPoolForward f =
      corner_pool_prepare_forward(input, mode, /*widen_16bit=*/false);
  if (f.input.numel() == 0) return f.result();
  const cudaStream_t stream = host::current_cuda_stream(input);
  host::dispatch_floating_types<__half, __nv_bfloat16>(
      host::dtype_of(f.input), "corner_pool_forward_cuda", [&](auto tag) {
        using T = typename decltype(tag)::type;
        VISDET_CUDA_CHECK(corner_pool_forward_cuda_launch<T>(
            host::const_data<T>(f.input), f.shape,
            host::mutable_data<T>(f.output), stream));
      });
  return f.result();
}

Tensor corner_pool_backward_cuda_kernel(const Tensor& grad_output,
                                        const Tensor& input,
                                        host::StringArg mode) {
  const host::CudaDeviceGuard device_guard(input);
  const CornerPoolBackward b = corner_pool_prepare_backward(
      grad_output, input, mode, /*widen_16bit=*/false);
  if (b.input.numel() == 0) return b.result();
  const cudaStream_t stream = host::current_cuda_stream(input);
  host::dispatch_floating_types<__half, __nv_bfloat16>(
      host::dtype_of(b.input), "corner_pool_backward_cuda", [&](auto tag) {
        using T = typename decltype(tag)::type;
        VISDET_CUDA_CHECK(corner_pool_backward_cuda_launch<T>(
            host::const_data<T>(b.grad_output), host::const_data<T>(b.input),
            b.shape, host::mutable_data<T>(b.grad_input), stream));
      });
  return b.result();
}

}  // namespace

VISDET_IMPL_WITH_BACKWARD(CUDA, corner_pool, corner_pool_forward_cuda_kernel,
                          corner_pool_backward_cuda_kernel)

}  // namespace visdet_ops
