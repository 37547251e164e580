// corner_pool: schema, argument checks shared by all devices, CPU
// registration. One source for the classic and the stable build
// (common/host.h). Autograd is registered in visdet_ops/ops/corner_pool.py.
#include <algorithm>
#include <string>

#include "common/checks.h"
#include "common/host.h"
#include "corner_pool.h"
#include "corner_pool_kernel.h"

namespace visdet_ops {
namespace {

using host::ScalarType;
using host::Tensor;

constexpr const char* kOp = "corner_pool";

int parse_mode(host::StringArg mode) {
  using namespace corner_pool_detail;
  if (mode == "top") return kTop;
  if (mode == "bottom") return kBottom;
  if (mode == "left") return kLeft;
  if (mode == "right") return kRight;
  VISDET_CHECK(false, kOp,
               ": mode must be 'top', 'bottom', 'left' or 'right', got '",
               std::string(mode), "'");
  return -1;  // unreachable
}

// Checks input ([N, C, H, W], floating) and mode and returns the lane view of
// the scan.
CornerPoolShape check_input(const Tensor& input, host::StringArg mode,
                            const char* arg) {
  using namespace corner_pool_detail;
  const int m = parse_mode(mode);
  check_dim(input, 4, kOp, arg);
  check_floating(input, kOp, arg);
  const int64_t n = input.size(0), c = input.size(1), h = input.size(2),
                w = input.size(3);
  if (m == kTop || m == kBottom) return CornerPoolShape{n * c, h, w, m == kTop};
  return CornerPoolShape{n * c * h, w, 1, m == kLeft};
}

ScalarType compute_dtype(ScalarType dtype, bool widen_16bit) {
  return widen_16bit ? host::compute_dtype(dtype) : dtype;
}

}  // namespace

CornerPoolForward corner_pool_prepare_forward(const Tensor& input,
                                              host::StringArg mode,
                                              bool widen_16bit) {
  CornerPoolForward f;
  f.shape = check_input(input, mode, "input");
  f.dtype = host::dtype_of(input);
  const ScalarType compute = compute_dtype(f.dtype, widen_16bit);
  f.input = host::contiguous(host::to_dtype(input, compute));
  f.output = host::empty(
      {input.size(0), input.size(1), input.size(2), input.size(3)}, compute,
      input);
  return f;
}

Tensor CornerPoolForward::result() const {
  return host::to_dtype(output, dtype);
}

CornerPoolBackward corner_pool_prepare_backward(const Tensor& grad_output,
                                                const Tensor& input,
                                                host::StringArg mode,
                                                bool widen_16bit) {
  CornerPoolBackward b;
  b.shape = check_input(input, mode, "input");
  VISDET_CHECK(host::same_shape(grad_output, input), kOp,
               ": grad_output must have the shape of input ",
               host::shape_of(input), ", got ", host::shape_of(grad_output));
  check_same_dtype(grad_output, input, kOp, "grad_output", "input");
  check_same_device(grad_output, input, kOp, "grad_output", "input");
  b.dtype = host::dtype_of(input);
  const ScalarType compute = compute_dtype(b.dtype, widen_16bit);
  b.input = host::contiguous(host::to_dtype(input, compute));
  b.grad_output = host::contiguous(host::to_dtype(grad_output, compute));
  b.grad_input = host::zeros(
      {input.size(0), input.size(1), input.size(2), input.size(3)}, compute,
      input);
  return b;
}

Tensor CornerPoolBackward::result() const {
  return host::to_dtype(grad_input, dtype);
}

namespace {

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

VISDET_LIBRARY_FRAGMENT(m) {
  m.def("corner_pool(Tensor input, str mode) -> Tensor");
  m.def(
      "_corner_pool_backward(Tensor grad_output, Tensor input, str mode) -> "
      "Tensor");
}

VISDET_LIBRARY_IMPL(CPU, m) {
  m.impl("corner_pool", VISDET_KERNEL(corner_pool_forward_cpu_kernel));
  m.impl("_corner_pool_backward",
         VISDET_KERNEL(corner_pool_backward_cpu_kernel));
}

}  // namespace visdet_ops
