// Argument checks for the torch-facing host layer. Every message names the op,
// the argument, what was expected and what came.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

namespace visdet_ops {

inline void check_dim(const at::Tensor& t, int64_t dim, const char* op,
                      const char* arg) {
  TORCH_CHECK(t.dim() == dim, op, ": ", arg, " must have ", dim,
              " dimensions, got shape ", t.sizes());
}

inline void check_size(const at::Tensor& t, int64_t dim, int64_t size,
                       const char* op, const char* arg, const char* what) {
  TORCH_CHECK(t.size(dim) == size, op, ": ", arg, " must have shape ", what,
              ", got ", t.sizes());
}

inline void check_floating(const at::Tensor& t, const char* op,
                           const char* arg) {
  TORCH_CHECK(at::isFloatingType(t.scalar_type()), op, ": ", arg,
              " must be a floating point tensor, got ", t.scalar_type());
}

inline void check_same_dtype(const at::Tensor& a, const at::Tensor& b,
                             const char* op, const char* arg_a,
                             const char* arg_b) {
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), op, ": ", arg_a, " and ",
              arg_b, " must have the same dtype, got ", a.scalar_type(),
              " and ", b.scalar_type());
}

inline void check_same_device(const at::Tensor& a, const at::Tensor& b,
                              const char* op, const char* arg_a,
                              const char* arg_b) {
  TORCH_CHECK(a.device() == b.device(), op, ": ", arg_a, " and ", arg_b,
              " must be on the same device, got ", a.device(), " and ",
              b.device());
}

}  // namespace visdet_ops
