// corner_pool: schema, argument checks shared by all devices, CPU
// registration.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <string>

#include "common/checks.h"
#include "common/reduced_float.h"
#include "corner_pool.h"
#include "corner_pool_kernel.h"

namespace visdet_ops {
namespace {

constexpr const char* kOp = "corner_pool";

int parse_mode(c10::string_view mode) {
  using namespace corner_pool_detail;
  if (mode == "top") return kTop;
  if (mode == "bottom") return kBottom;
  if (mode == "left") return kLeft;
  if (mode == "right") return kRight;
  TORCH_CHECK(false, kOp,
              ": mode must be 'top', 'bottom', 'left' or 'right', got '",
              std::string(mode), "'");
}

}  // namespace

CornerPoolShape corner_pool_shape(const at::Tensor& input,
                                  c10::string_view mode, const char* arg) {
  using namespace corner_pool_detail;
  const int m = parse_mode(mode);
  check_dim(input, 4, kOp, arg);
  check_floating(input, kOp, arg);
  const int64_t n = input.size(0), c = input.size(1), h = input.size(2),
                w = input.size(3);
  CornerPoolShape s;
  if (m == kTop || m == kBottom) {
    s = CornerPoolShape{n * c, h, w, m == kTop};
  } else {
    s = CornerPoolShape{n * c * h, w, 1, m == kLeft};
  }
  return s;
}

CornerPoolShape corner_pool_backward_shape(const at::Tensor& grad_output,
                                           const at::Tensor& input,
                                           c10::string_view mode) {
  const CornerPoolShape s = corner_pool_shape(input, mode, "input");
  TORCH_CHECK(grad_output.sizes() == input.sizes(), kOp,
              ": grad_output must have the shape of input ", input.sizes(),
              ", got ", grad_output.sizes());
  check_same_dtype(grad_output, input, kOp, "grad_output", "input");
  check_same_device(grad_output, input, kOp, "grad_output", "input");
  return s;
}

namespace {

void check_cpu_dtype(const at::Tensor& input) {
  TORCH_CHECK(input.scalar_type() == at::kFloat || input.scalar_type() == at::kDouble,
              kOp, ": input must be float32, float64, float16 or bfloat16, got ",
              input.scalar_type());
}

int64_t grain_for(const CornerPoolShape& s) {
  return std::max<int64_t>(1, 32768 / std::max<int64_t>(1, s.length * s.inner));
}

at::Tensor corner_pool_forward_cpu_kernel(const at::Tensor& input,
                                          c10::string_view mode) {
  const CornerPoolShape s = corner_pool_shape(input, mode, "input");
  if (is_reduced_float(input)) {  // a max: exact through float32
    return corner_pool_forward_cpu_kernel(input.to(at::kFloat), mode)
        .to(input.scalar_type());
  }
  check_cpu_dtype(input);
  const at::Tensor in = input.contiguous();
  at::Tensor output = at::empty_like(in);
  if (in.numel() == 0) return output;
  AT_DISPATCH_FLOATING_TYPES(in.scalar_type(), "corner_pool_forward_cpu", [&] {
    const scalar_t* x = in.data_ptr<scalar_t>();
    scalar_t* y = output.data_ptr<scalar_t>();
    at::parallel_for(0, s.outer, grain_for(s), [&](int64_t b, int64_t e) {
      corner_pool_forward_cpu<scalar_t>(x, s, b, e, y);
    });
  });
  return output;
}

at::Tensor corner_pool_backward_cpu_kernel(const at::Tensor& grad_output,
                                           const at::Tensor& input,
                                           c10::string_view mode) {
  const CornerPoolShape s = corner_pool_backward_shape(grad_output, input, mode);
  if (is_reduced_float(input)) {
    return corner_pool_backward_cpu_kernel(grad_output.to(at::kFloat),
                                           input.to(at::kFloat), mode)
        .to(input.scalar_type());
  }
  check_cpu_dtype(input);
  const at::Tensor in = input.contiguous();
  const at::Tensor g = grad_output.contiguous();
  at::Tensor grad_input = at::zeros_like(in);
  if (in.numel() == 0) return grad_input;
  AT_DISPATCH_FLOATING_TYPES(in.scalar_type(), "corner_pool_backward_cpu", [&] {
    const scalar_t* x = in.data_ptr<scalar_t>();
    const scalar_t* go = g.data_ptr<scalar_t>();
    scalar_t* gi = grad_input.data_ptr<scalar_t>();
    at::parallel_for(0, s.outer, grain_for(s), [&](int64_t b, int64_t e) {
      corner_pool_backward_cpu<scalar_t>(go, x, s, b, e, gi);
    });
  });
  return grad_input;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(visdet_ops, m) {
  m.def("corner_pool(Tensor input, str mode) -> Tensor");
  m.def(
      "_corner_pool_backward(Tensor grad_output, Tensor input, str mode) -> "
      "Tensor");
}

TORCH_LIBRARY_IMPL(visdet_ops, CPU, m) {
  m.impl("corner_pool", &corner_pool_forward_cpu_kernel);
  m.impl("_corner_pool_backward", &corner_pool_backward_cpu_kernel);
}

}  // namespace visdet_ops
