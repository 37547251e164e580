// carafe / carafe_naive: CPU host layer (torch-facing, through the host
// adapter), the mirror image of carafe_cuda_host.cpp. CPU loops:
// carafe_cpu.cpp (one implementation serves both ops). Every element is
// written once: deterministic.
#include <tuple>

#include "carafe.h"
#include "common/host.h"
#include "common/scalar.h"

namespace visdet_ops {
namespace {

using host::Tensor;

constexpr int64_t kGrain = 2048;

template <CarafeOp kOp>
Tensor carafe_forward_cpu_kernel(const Tensor& features, const Tensor& masks,
                                 int64_t kernel_size, int64_t group_size,
                                 int64_t scale_factor) {
  const CarafeForward f =
      carafe_prepare_forward(carafe_op_name(kOp), features, masks, kernel_size,
                             group_size, scale_factor);
  const int64_t n = f.output.numel();
  if (n == 0) return f.output;
  // float16/bfloat16 are read directly (no float32 copy) and computed in float.
  host::dispatch_floating_types<HostHalf, HostBFloat16>(
      host::dtype_of(features), "carafe_forward_cpu", [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* fp = host::const_data<T>(f.features);
        const T* mp = host::const_data<T>(f.masks);
        T* out = host::mutable_data<T>(f.output);
        host::parallel_for(0, n, kGrain, [&](int64_t b, int64_t e) {
          carafe_forward_cpu<T>(fp, mp, f.shape, b, e, out);
        });
      });
  return f.output;
}

template <CarafeOp kOp>
std::tuple<Tensor, Tensor> carafe_backward_cpu_kernel(
    const Tensor& grad_output, const Tensor& features, const Tensor& masks,
    int64_t kernel_size, int64_t group_size, int64_t scale_factor) {
  const CarafeBackward b =
      carafe_prepare_backward(carafe_op_name(kOp), grad_output, features,
                              masks, kernel_size, group_size, scale_factor);
  host::dispatch_floating_types<HostHalf, HostBFloat16>(
      host::dtype_of(features), "carafe_backward_cpu", [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* gp = host::const_data<T>(b.grad_output);
        const T* fp = host::const_data<T>(b.features);
        const T* mp = host::const_data<T>(b.masks);
        T* gf = host::mutable_data<T>(b.grad_features);
        T* gm = host::mutable_data<T>(b.grad_masks);
        host::parallel_for(0, b.grad_features.numel(), kGrain,
                           [&](int64_t begin, int64_t end) {
                             carafe_grad_features_cpu<T>(gp, mp, b.shape,
                                                         begin, end, gf);
                           });
        host::parallel_for(0, b.grad_masks.numel(), kGrain,
                           [&](int64_t begin, int64_t end) {
                             carafe_grad_masks_cpu<T>(gp, fp, b.shape, begin,
                                                      end, gm);
                           });
      });
  return b.outputs();
}

}  // namespace

VISDET_IMPL_WITH_BACKWARD(CPU, carafe,
                          carafe_forward_cpu_kernel<CarafeOp::kCarafe>,
                          carafe_backward_cpu_kernel<CarafeOp::kCarafe>)
VISDET_IMPL_WITH_BACKWARD(CPU, carafe_naive,
                          carafe_forward_cpu_kernel<CarafeOp::kCarafeNaive>,
                          carafe_backward_cpu_kernel<CarafeOp::kCarafeNaive>)

}  // namespace visdet_ops
