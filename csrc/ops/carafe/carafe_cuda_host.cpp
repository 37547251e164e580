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

// carafe runs the tiled kernels, carafe_naive the direct ones.
constexpr bool tiled(CarafeOp op) { return op == CarafeOp::kCarafe; }

template <CarafeOp kOp>
Tensor carafe_forward_cuda_kernel(const Tensor& features, const Tensor& masks,
                                  int64_t kernel_size, int64_t group_size,
                                  int64_t scale_factor) {
  const CarafeForward f =
      carafe_prepare_forward(carafe_op_name(kOp), features, masks, kernel_size,
                             group_size, scale_factor);
  check_cuda(carafe_op_name(kOp), features);
  if (f.output.numel() == 0) return f.output;
  const host::CudaDeviceGuard device_guard(features);
  const cudaStream_t stream = host::current_cuda_stream(features);
  host::dispatch_floating_types<__half, __nv_bfloat16>(
      host::dtype_of(features), "carafe_forward_cuda", [&](auto tag) {
        using T = typename decltype(tag)::type;
        VISDET_CUDA_CHECK(carafe_forward_cuda_launch<T>(
            host::const_data<T>(f.features), host::const_data<T>(f.masks),
            f.shape, tiled(kOp), host::mutable_data<T>(f.output), stream));
      });
  return f.output;
}

template <CarafeOp kOp>
std::tuple<Tensor, Tensor> carafe_backward_cuda_kernel(
    const Tensor& grad_output, const Tensor& features, const Tensor& masks,
    int64_t kernel_size, int64_t group_size, int64_t scale_factor) {
  const CarafeBackward b =
      carafe_prepare_backward(carafe_op_name(kOp), grad_output, features,
                              masks, kernel_size, group_size, scale_factor);
  check_cuda(carafe_op_name(kOp), features);
  const host::CudaDeviceGuard device_guard(features);
  const cudaStream_t stream = host::current_cuda_stream(features);
  host::dispatch_floating_types<__half, __nv_bfloat16>(
      host::dtype_of(features), "carafe_backward_cuda", [&](auto tag) {
        using T = typename decltype(tag)::type;
        VISDET_CUDA_CHECK(carafe_backward_cuda_launch<T>(
            host::const_data<T>(b.grad_output),
            host::const_data<T>(b.features), host::const_data<T>(b.masks),
            b.shape, tiled(kOp), host::mutable_data<T>(b.grad_features),
            host::mutable_data<T>(b.grad_masks), stream));
      });
  return b.outputs();
}

}  // namespace

VISDET_IMPL_WITH_BACKWARD(CUDA, carafe,
                          carafe_forward_cuda_kernel<CarafeOp::kCarafe>,
                          carafe_backward_cuda_kernel<CarafeOp::kCarafe>)
VISDET_IMPL_WITH_BACKWARD(CUDA, carafe_naive,
                          carafe_forward_cuda_kernel<CarafeOp::kCarafeNaive>,
                          carafe_backward_cuda_kernel<CarafeOp::kCarafeNaive>)

}  // namespace visdet_ops
