// carafe / carafe_naive: schemas, and the argument checks and prepare steps
// shared by all devices (the two ops compute the same function; they differ
// only in their CUDA kernels). Each device registers from its own host file:
// carafe_cpu_host.cpp and carafe_cuda_host.cpp. One source for the classic
// and the stable build (common/host.h). Autograd and autocast are registered
// in visdet_ops/ops/carafe.py.
#include "carafe.h"
#include "common/checks.h"
#include "common/host.h"

namespace visdet_ops {
namespace {

using host::Tensor;

// Checks (op names carafe or carafe_naive) features [N, C, H, W] and masks
// [N, G*K*K, H*S, W*S] and the sizes; returns the shape.
CarafeShape check_forward(const char* op, const Tensor& features,
                          const Tensor& masks, int64_t kernel_size,
                          int64_t group_size, int64_t scale_factor) {
  check_dim(features, 4, op, "features");
  check_dim(masks, 4, op, "masks");
  check_floating(features, op, "features");
  check_same_dtype(features, masks, op, "features", "masks");
  check_same_device(features, masks, op, "features", "masks");
  VISDET_CHECK(kernel_size >= 1 && kernel_size % 2 == 1, op,
               ": kernel_size must be a positive odd number, got ",
               kernel_size);
  VISDET_CHECK(group_size >= 1, op, ": group_size must be >= 1, got ",
               group_size);
  VISDET_CHECK(scale_factor >= 1, op, ": scale_factor must be >= 1, got ",
               scale_factor);
  check_int_range(kernel_size, 1, int_bounds::kMaxCarafeKernel, op,
                  "kernel_size");
  check_int_range(group_size, 1, int_bounds::kMaxCarafeGroups, op,
                  "group_size");
  check_int_range(scale_factor, 1, int_bounds::kMaxCarafeScale, op,
                  "scale_factor");
  const int64_t n = features.size(0), c = features.size(1),
                h = features.size(2), w = features.size(3);
  VISDET_CHECK(c % group_size == 0, op, ": features' channels (", c,
               ") must be divisible by group_size (", group_size, ")");
  const int64_t mc = kernel_size * kernel_size * group_size;
  checked_numel({n, c, h, scale_factor, w, scale_factor}, op,
                "the output [N, C, H * scale_factor, W * scale_factor]");
  VISDET_CHECK(masks.size(0) == n && masks.size(1) == mc &&
                   masks.size(2) == h * scale_factor &&
                   masks.size(3) == w * scale_factor,
               op,
               ": masks must have shape [N, kernel_size^2 * group_size, H * "
               "scale_factor, W * scale_factor] = [",
               n, ", ", mc, ", ", h * scale_factor, ", ", w * scale_factor,
               "] for features ", host::shape_of(features), ", got ",
               host::shape_of(masks));
  return CarafeShape{n, c, h, w, kernel_size, group_size, scale_factor};
}

}  // namespace

CarafeForward carafe_prepare_forward(const char* op, const Tensor& features,
                                     const Tensor& masks, int64_t kernel_size,
                                     int64_t group_size,
                                     int64_t scale_factor) {
  CarafeForward f;
  f.shape = check_forward(op, features, masks, kernel_size, group_size,
                          scale_factor);
  const CarafeShape& s = f.shape;
  f.features = host::contiguous(features);
  f.masks = host::contiguous(masks);
  f.output = host::empty({s.batch, s.channels, s.out_h(), s.out_w()},
                         host::dtype_of(features), features);
  return f;
}

CarafeBackward carafe_prepare_backward(const char* op,
                                       const Tensor& grad_output,
                                       const Tensor& features,
                                       const Tensor& masks,
                                       int64_t kernel_size, int64_t group_size,
                                       int64_t scale_factor) {
  CarafeBackward b;
  b.shape = check_forward(op, features, masks, kernel_size, group_size,
                          scale_factor);
  const CarafeShape& s = b.shape;
  VISDET_CHECK(grad_output.dim() == 4 && grad_output.size(0) == s.batch &&
                   grad_output.size(1) == s.channels &&
                   grad_output.size(2) == s.out_h() &&
                   grad_output.size(3) == s.out_w(),
               op, ": grad_output must have shape [", s.batch, ", ",
               s.channels, ", ", s.out_h(), ", ", s.out_w(), "], got ",
               host::shape_of(grad_output));
  check_same_dtype(grad_output, features, op, "grad_output", "features");
  check_same_device(grad_output, features, op, "grad_output", "features");
  const host::ScalarType dtype = host::dtype_of(features);
  b.grad_output = host::contiguous(grad_output);
  b.features = host::contiguous(features);
  b.masks = host::contiguous(masks);
  b.grad_features = host::empty({s.batch, s.channels, s.height, s.width},
                                dtype, features);
  b.grad_masks = host::empty(
      {masks.size(0), masks.size(1), masks.size(2), masks.size(3)}, dtype,
      features);
  return b;
}

VISDET_LIBRARY_FRAGMENT(m) {
  m.def(
      "carafe(Tensor features, Tensor masks, int kernel_size, int group_size, "
      "int scale_factor) -> Tensor");
  m.def(
      "_carafe_backward(Tensor grad_output, Tensor features, Tensor masks, "
      "int kernel_size, int group_size, int scale_factor) -> (Tensor, Tensor)");
  m.def(
      "carafe_naive(Tensor features, Tensor masks, int kernel_size, int "
      "group_size, int scale_factor) -> Tensor");
  m.def(
      "_carafe_naive_backward(Tensor grad_output, Tensor features, Tensor "
      "masks, int kernel_size, int group_size, int scale_factor) -> (Tensor, "
      "Tensor)");
}

}  // namespace visdet_ops
