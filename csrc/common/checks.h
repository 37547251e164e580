// Argument checks for the torch-facing host layer. Every message names the op,
// the argument, what was expected and what came.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <cstdlib>
#include <cstring>

namespace visdet_ops {

// Checks of tensor *values* on CUDA (RoI coordinates, class targets) would make
// the host wait for the GPU. By default the kernels handle bad values
// themselves (NaN results, never an out-of-bounds access); with
// VISDET_OPS_SYNC_CHECKS=1 (every op) or the op family's own variable set to
// 1, the host checks them first and raises an error naming the argument.
inline bool sync_checks_enabled(const char* family_variable) {
  for (const char* name : {"VISDET_OPS_SYNC_CHECKS", family_variable}) {
    const char* value = std::getenv(name);
    if (value != nullptr && std::strcmp(value, "1") == 0) return true;
  }
  return false;
}

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

// Any integer dtype (bool excluded).
inline void check_integer(const at::Tensor& t, const char* op,
                          const char* arg) {
  TORCH_CHECK(!at::isFloatingType(t.scalar_type()) &&
                  !at::isComplexType(t.scalar_type()) &&
                  t.scalar_type() != at::kBool,
              op, ": ", arg, " must be an integer tensor, got ",
              t.scalar_type());
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
