// Argument checks for the torch-facing host layer. Every message names the op,
// the argument, what was expected and what came.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <c10/util/safe_numerics.h>

#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <limits>

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

// Bounds of the integer arguments: generous for real models, small enough
// that no accepted value narrows, wraps a size formula or makes a loop run
// for minutes. The same numbers are in visdet_ops/ops/_args.py (Python
// wrappers, modules, fake impls) and in the "Integer arguments" table of
// docs/ops.md; tests/test_integer_edges.py checks every one from both sides.
namespace int_bounds {
// Pooled output size of the RoI ops (mmdet uses 7 and 14): 4096^2 bins
// per RoI keeps every index of [K, C, PH, PW] far from int64 limits.
constexpr int64_t kMaxPooledSize = 4096;
// Samples per bin side; -1 and 0 mean adaptive (torchvision and mmcv).
// 128^2 samples per bin is far past where more samples change a mean.
constexpr int64_t kMinSamplingRatio = -1;
constexpr int64_t kMaxSamplingRatio = 128;
// Convolution geometry (deform_conv2d, masked_conv2d): real models use
// single or double digits; 2^16 keeps `size + 2 * pad - dilation * (k - 1)`
// exact in int64 for any tensor that fits in memory.
constexpr int64_t kMaxStride = 1 << 16;
constexpr int64_t kMaxPadding = 1 << 16;
constexpr int64_t kMaxDilation = 1 << 16;
// Groups must divide a real channel count anyway; the bound only keeps a
// channel-free call (C = 0) from looping over 2^63 groups.
constexpr int64_t kMaxGroups = 1 << 20;
// CARAFE: masks have kernel_size^2 * group_size channels and the output is
// scale_factor times the input per side; mmdet uses 5, 1 and 2.
constexpr int64_t kMaxCarafeKernel = 63;
constexpr int64_t kMaxCarafeGroups = 1 << 16;
constexpr int64_t kMaxCarafeScale = 64;
}  // namespace int_bounds

// An integer argument in [lo, hi], checked before any allocation or launch.
inline void check_int_range(int64_t value, int64_t lo, int64_t hi,
                            const char* op, const char* arg) {
  TORCH_CHECK(value >= lo && value <= hi, op, ": ", arg, " must be in [", lo,
              ", ", hi, "], got ", value);
}

// The product of sizes that a tensor or buffer will have, checked for int64
// overflow (a wrapped product would allocate too little and index past it).
inline int64_t checked_numel(std::initializer_list<int64_t> sizes,
                             const char* op, const char* what) {
  uint64_t n = 1;
  bool overflow = false, empty = false;
  for (const int64_t s : sizes) {
    TORCH_CHECK(s >= 0, op, ": ", what, " has a negative size ", s);
    empty |= s == 0;
    overflow |= c10::mul_overflows(n, static_cast<uint64_t>(s), &n);
  }
  if (empty) return 0;
  TORCH_CHECK(!overflow && n <= static_cast<uint64_t>(
                                    std::numeric_limits<int64_t>::max()),
              op, ": ", what, " would have more than 2^63 - 1 elements");
  return static_cast<int64_t>(n);
}

inline void check_same_device(const at::Tensor& a, const at::Tensor& b,
                              const char* op, const char* arg_a,
                              const char* arg_b) {
  TORCH_CHECK(a.device() == b.device(), op, ": ", arg_a, " and ", arg_b,
              " must be on the same device, got ", a.device(), " and ",
              b.device());
}

}  // namespace visdet_ops
