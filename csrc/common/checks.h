// Argument checks for the torch-facing host layer. Every message names the op,
// the argument, what was expected and what came. Written against the host
// adapter (common/host.h): the same checks in the classic and stable builds.
#pragma once

#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <limits>

#include "common/host.h"

namespace visdet_ops {

using host::Tensor;

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

inline void check_dim(const Tensor& t, int64_t dim, const char* op,
                      const char* arg) {
  VISDET_CHECK(t.dim() == dim, op, ": ", arg, " must have ", dim,
               " dimensions, got shape ", host::shape_of(t));
}

inline void check_size(const Tensor& t, int64_t dim, int64_t size,
                       const char* op, const char* arg, const char* what) {
  VISDET_CHECK(t.size(dim) == size, op, ": ", arg, " must have shape ", what,
               ", got ", host::shape_of(t));
}

// float32, float64, float16 or bfloat16 (the dtypes the kernels have).
inline void check_floating(const Tensor& t, const char* op, const char* arg) {
  VISDET_CHECK(host::is_floating(host::dtype_of(t)), op, ": ", arg,
               " must be a floating point tensor, got ", host::dtype_of(t));
}

// Any integer dtype (bool excluded).
inline void check_integer(const Tensor& t, const char* op, const char* arg) {
  VISDET_CHECK(host::is_integer(host::dtype_of(t)), op, ": ", arg,
               " must be an integer tensor, got ", host::dtype_of(t));
}

inline void check_same_dtype(const Tensor& a, const Tensor& b, const char* op,
                             const char* arg_a, const char* arg_b) {
  VISDET_CHECK(host::dtype_of(a) == host::dtype_of(b), op, ": ", arg_a,
               " and ", arg_b, " must have the same dtype, got ",
               host::dtype_of(a), " and ", host::dtype_of(b));
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
  VISDET_CHECK(value >= lo && value <= hi, op, ": ", arg, " must be in [", lo,
              ", ", hi, "], got ", value);
}

// The product of sizes that a tensor or buffer will have, checked for int64
// overflow (a wrapped product would allocate too little and index past it).
inline int64_t checked_numel(std::initializer_list<int64_t> sizes,
                             const char* op, const char* what) {
  uint64_t n = 1;
  bool overflow = false, empty = false;
  for (const int64_t s : sizes) {
    VISDET_CHECK(s >= 0, op, ": ", what, " has a negative size ", s);
    empty |= s == 0;
    overflow |= __builtin_mul_overflow(n, static_cast<uint64_t>(s), &n);
  }
  if (empty) return 0;
  VISDET_CHECK(!overflow && n <= static_cast<uint64_t>(
                                    std::numeric_limits<int64_t>::max()),
              op, ": ", what, " would have more than 2^63 - 1 elements");
  return static_cast<int64_t>(n);
}

inline void check_same_device(const Tensor& a, const Tensor& b,
                              const char* op, const char* arg_a,
                              const char* arg_b) {
  VISDET_CHECK(host::same_device(a, b), op, ": ", arg_a, " and ", arg_b,
               " must be on the same device, got ", host::device_of(a),
               " and ", host::device_of(b));
}

}  // namespace visdet_ops
