// corner_pool: CPU host layer (torch-facing, through the host adapter), the
// mirror image of corner_pool_cuda_host.cpp. CPU loops: corner_pool_cpu.cpp.
#include <algorithm>

#include "common/host.h"
#include "corner_pool.h"

namespace visdet_ops {
namespace {

using host::ScalarType;
using host::Tensor;

constexpr const char* kOp = "corner_pool";

void check_cpu_dtype(const Tensor& input) {
  const ScalarType dtype = host::dtype_of(input);
  VISDET_CHECK(dtype == ScalarType::Float || dtype == ScalarType::Double, kOp,
               ": input must be float32, float64, float16 or bfloat16, got ",
               dtype);
}

int64_t grain_for(const CornerPoolShape& s) {
  return std::max<int64_t>(1, 32768 / std::max<int64_t>(1, s.length * s.inner));
}

Tensor corner_pool_forward_cpu_kernel(const Tensor& input,
                                      host::StringArg mode) {
  // float16 / bfloat16: through float32 (a max: exact), rounded back.
  const CornerPoolForward f =
      corner_pool_prepare_forward(input, mode, /*widen_16bit=*/true);
  check_cpu_dtype(f.input);
  if (f.input.numel() == 0) return f.result();
  const CornerPoolShape& s = f.shape;
  host::dispatch_float_double(
      host::dtype_of(f.input), "corner_pool_forward_cpu", [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* x = host::const_data<T>(f.input);
        T* y = host::mutable_data<T>(f.output);
        host::parallel_for(0, s.outer, grain_for(s),
                           [&](int64_t b, int64_t e) {
                             corner_pool_forward_cpu<T>(x, s, b, e, y);
                           });
      });
  return f.result();
}

Tensor corner_pool_backward_cpu_kernel(const Tensor& grad_output,
                                       const Tensor& input,
                                       host::StringArg mode) {
  const CornerPoolBackward b = corner_pool_prepare_backward(
      grad_output, input, mode, /*widen_16bit=*/true);
  check_cpu_dtype(b.input);
  if (b.input.numel() == 0) return b.result();
  const CornerPoolShape& s = b.shape;
  host::dispatch_float_double(
      host::dtype_of(b.input), "corner_pool_backward_cpu", [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* x = host::const_data<T>(b.input);
        const T* go = host::const_data<T>(b.grad_output);
        T* gi = host::mutable_data<T>(b.grad_input);
        host::parallel_for(0, s.outer, grain_for(s),
                           [&](int64_t begin, int64_t end) {
                             corner_pool_backward_cpu<T>(go, x, s, begin, end,
                                                         gi);
                           });
      });
  return b.result();
}

}  // namespace

VISDET_IMPL_WITH_BACKWARD(CPU, corner_pool, corner_pool_forward_cpu_kernel,
                          corner_pool_backward_cpu_kernel)

}  // namespace visdet_ops
