// corner_pool: schema, and the argument checks and prepare steps shared by all
// devices. Each device registers from its own host file:
// corner_pool_cpu_host.cpp and corner_pool_cuda_host.cpp. One source for the
// classic and the stable build (common/host.h). Autograd is registered in
// visdet_ops/ops/corner_pool.py.
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

VISDET_LIBRARY_FRAGMENT(m) {
  m.def("corner_pool(Tensor input, str mode) -> Tensor");
  m.def(
      "_corner_pool_backward(Tensor grad_output, Tensor input, str mode) -> "
      "Tensor");
}

}  // namespace visdet_ops
