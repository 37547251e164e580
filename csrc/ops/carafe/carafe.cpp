// carafe / carafe_naive: schemas, argument checks shared by all devices, CPU
// registration (one CPU implementation serves both: they compute the same
// function; they differ only in their CUDA kernels).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include "carafe.h"
#include "common/checks.h"
#include "common/reduced_float.h"

namespace visdet_ops {

CarafeShape carafe_check(const char* op, const at::Tensor& features,
                         const at::Tensor& masks, int64_t kernel_size,
                         int64_t group_size, int64_t scale_factor) {
  check_dim(features, 4, op, "features");
  check_dim(masks, 4, op, "masks");
  check_floating(features, op, "features");
  check_same_dtype(features, masks, op, "features", "masks");
  check_same_device(features, masks, op, "features", "masks");
  TORCH_CHECK(kernel_size >= 1 && kernel_size % 2 == 1, op,
              ": kernel_size must be a positive odd number, got ", kernel_size);
  TORCH_CHECK(group_size >= 1, op, ": group_size must be >= 1, got ", group_size);
  TORCH_CHECK(scale_factor >= 1, op, ": scale_factor must be >= 1, got ", scale_factor);
  check_int_range(kernel_size, 1, int_bounds::kMaxCarafeKernel, op, "kernel_size");
  check_int_range(group_size, 1, int_bounds::kMaxCarafeGroups, op, "group_size");
  check_int_range(scale_factor, 1, int_bounds::kMaxCarafeScale, op, "scale_factor");
  const int64_t n = features.size(0), c = features.size(1), h = features.size(2),
                w = features.size(3);
  TORCH_CHECK(c % group_size == 0, op, ": features' channels (", c,
              ") must be divisible by group_size (", group_size, ")");
  const int64_t mc = kernel_size * kernel_size * group_size;
  checked_numel({n, c, h, scale_factor, w, scale_factor}, op,
                "the output [N, C, H * scale_factor, W * scale_factor]");
  TORCH_CHECK(masks.size(0) == n && masks.size(1) == mc && masks.size(2) == h * scale_factor &&
                  masks.size(3) == w * scale_factor,
              op, ": masks must have shape [N, kernel_size^2 * group_size, H * scale_factor, "
              "W * scale_factor] = [", n, ", ", mc, ", ", h * scale_factor, ", ",
              w * scale_factor, "] for features ", features.sizes(), ", got ", masks.sizes());
  return CarafeShape{n, c, h, w, kernel_size, group_size, scale_factor};
}

CarafeShape carafe_check_backward(const char* op, const at::Tensor& grad_output,
                                  const at::Tensor& features,
                                  const at::Tensor& masks, int64_t kernel_size,
                                  int64_t group_size, int64_t scale_factor) {
  const CarafeShape s =
      carafe_check(op, features, masks, kernel_size, group_size, scale_factor);
  TORCH_CHECK(grad_output.dim() == 4 && grad_output.size(0) == s.batch &&
                  grad_output.size(1) == s.channels && grad_output.size(2) == s.out_h() &&
                  grad_output.size(3) == s.out_w(),
              op, ": grad_output must have shape [", s.batch, ", ", s.channels, ", ",
              s.out_h(), ", ", s.out_w(), "], got ", grad_output.sizes());
  check_same_dtype(grad_output, features, op, "grad_output", "features");
  check_same_device(grad_output, features, op, "grad_output", "features");
  return s;
}

namespace {

constexpr int64_t kGrain = 2048;

at::Tensor forward_cpu(const char* op, const at::Tensor& features, const at::Tensor& masks,
                       int64_t kernel_size, int64_t group_size, int64_t scale_factor) {
  const CarafeShape s =
      carafe_check(op, features, masks, kernel_size, group_size, scale_factor);
  const at::Tensor f = features.contiguous(), m = masks.contiguous();
  at::Tensor output = at::empty({s.batch, s.channels, s.out_h(), s.out_w()}, f.options());
  if (output.numel() == 0) return output;
  // float16/bfloat16 are read directly (no float32 copy) and computed in float.
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, f.scalar_type(), "carafe_forward_cpu", [&] {
    using T = host_t<scalar_t>;
    const T* fp = host_data<scalar_t>(f);
    const T* mp = host_data<scalar_t>(m);
    T* out = host_mutable_data<scalar_t>(output);
    at::parallel_for(0, output.numel(), kGrain, [&](int64_t b, int64_t e) {
      carafe_forward_cpu<T>(fp, mp, s, b, e, out);
    });
  });
  return output;
}

std::tuple<at::Tensor, at::Tensor> backward_cpu(const char* op, const at::Tensor& grad_output,
                                                const at::Tensor& features,
                                                const at::Tensor& masks, int64_t kernel_size,
                                                int64_t group_size, int64_t scale_factor) {
  const CarafeShape s = carafe_check_backward(op, grad_output, features, masks, kernel_size,
                                              group_size, scale_factor);
  const at::Tensor g = grad_output.contiguous(), f = features.contiguous(),
                   m = masks.contiguous();
  at::Tensor grad_features = at::empty(f.sizes(), f.options());
  at::Tensor grad_masks = at::empty(m.sizes(), m.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, f.scalar_type(), "carafe_backward_cpu", [&] {
    using T = host_t<scalar_t>;
    const T* gp = host_data<scalar_t>(g);
    const T* fp = host_data<scalar_t>(f);
    const T* mp = host_data<scalar_t>(m);
    T* gf = host_mutable_data<scalar_t>(grad_features);
    T* gm = host_mutable_data<scalar_t>(grad_masks);
    at::parallel_for(0, grad_features.numel(), kGrain, [&](int64_t b, int64_t e) {
      carafe_grad_features_cpu<T>(gp, mp, s, b, e, gf);
    });
    at::parallel_for(0, grad_masks.numel(), kGrain, [&](int64_t b, int64_t e) {
      carafe_grad_masks_cpu<T>(gp, fp, s, b, e, gm);
    });
  });
  return {grad_features, grad_masks};
}

at::Tensor carafe_forward_cpu_kernel(const at::Tensor& features, const at::Tensor& masks,
                                     int64_t k, int64_t g, int64_t s) {
  return forward_cpu("carafe", features, masks, k, g, s);
}
at::Tensor carafe_naive_forward_cpu_kernel(const at::Tensor& features, const at::Tensor& masks,
                                           int64_t k, int64_t g, int64_t s) {
  return forward_cpu("carafe_naive", features, masks, k, g, s);
}
std::tuple<at::Tensor, at::Tensor> carafe_backward_cpu_kernel(
    const at::Tensor& grad_output, const at::Tensor& features, const at::Tensor& masks,
    int64_t k, int64_t g, int64_t s) {
  return backward_cpu("carafe", grad_output, features, masks, k, g, s);
}
std::tuple<at::Tensor, at::Tensor> carafe_naive_backward_cpu_kernel(
    const at::Tensor& grad_output, const at::Tensor& features, const at::Tensor& masks,
    int64_t k, int64_t g, int64_t s) {
  return backward_cpu("carafe_naive", grad_output, features, masks, k, g, s);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(visdet_ops, m) {
  m.def(
      "carafe(Tensor features, Tensor masks, int kernel_size, int group_size, "
      "int scale_factor) -> Tensor");
  m.def(
      "_carafe_backward(Tensor grad_output, Tensor features, Tensor masks, "
      "int kernel_size, int group_size, int scale_factor) -> (Tensor, Tensor)");
  m.def(
      "carafe_naive(Tensor features, Tensor masks, int kernel_size, int group_size, "
      "int scale_factor) -> Tensor");
  m.def(
      "_carafe_naive_backward(Tensor grad_output, Tensor features, Tensor masks, "
      "int kernel_size, int group_size, int scale_factor) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(visdet_ops, CPU, m) {
  m.impl("carafe", &carafe_forward_cpu_kernel);
  m.impl("_carafe_backward", &carafe_backward_cpu_kernel);
  m.impl("carafe_naive", &carafe_naive_forward_cpu_kernel);
  m.impl("_carafe_naive_backward", &carafe_naive_backward_cpu_kernel);
}

}  // namespace visdet_ops
