// Storage type vs compute type of the floating-point kernels. Torch-free,
// usable on host and device.
//
// float and double compute in themselves. Half and bfloat16 (CUDA only) are
// stored as __half / __nv_bfloat16 and computed in float: load with to_acc,
// store with from_acc (the cuda_fp16/cuda_bf16 intrinsics, so the kernels do
// not depend on the implicit conversions that torch's nvcc flags switch off).
#pragma once

#include <cstdint>
#include <limits>

#include "common/macros.h"

#if defined(VISDET_OPS_WITH_CUDA) || defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#define VISDET_HAS_CUDA_HALF 1
#endif

namespace visdet_ops {

template <typename T>
struct ScalarOps {
  using acc = T;
  static VISDET_HOST_DEVICE VISDET_INLINE acc load(T v) { return v; }
  static VISDET_HOST_DEVICE VISDET_INLINE T store(acc v) { return v; }
};

#if defined(VISDET_HAS_CUDA_HALF)
template <>
struct ScalarOps<__half> {
  using acc = float;
  static VISDET_HOST_DEVICE VISDET_INLINE float load(__half v) {
    return __half2float(v);
  }
  static VISDET_HOST_DEVICE VISDET_INLINE __half store(float v) {
    return __float2half_rn(v);
  }
};

template <>
struct ScalarOps<__nv_bfloat16> {
  using acc = float;
  static VISDET_HOST_DEVICE VISDET_INLINE float load(__nv_bfloat16 v) {
    return __bfloat162float(v);
  }
  static VISDET_HOST_DEVICE VISDET_INLINE __nv_bfloat16 store(float v) {
    return __float2bfloat16_rn(v);
  }
};
#endif

// The compute (and gradient-accumulation) type of storage type T.
template <typename T>
using acc_t = typename ScalarOps<T>::acc;

template <typename T>
VISDET_HOST_DEVICE VISDET_INLINE acc_t<T> to_acc(T v) {
  return ScalarOps<T>::load(v);
}

template <typename T>
VISDET_HOST_DEVICE VISDET_INLINE T from_acc(acc_t<T> v) {
  return ScalarOps<T>::store(v);
}

// A quiet NaN (std::numeric_limits is not usable in device code without
// --expt-relaxed-constexpr, which we keep off).
template <typename A>
VISDET_HOST_DEVICE VISDET_INLINE A quiet_nan();
template <>
VISDET_HOST_DEVICE VISDET_INLINE float quiet_nan<float>() {
#if defined(__CUDA_ARCH__)
  return __int_as_float(0x7fc00000);
#else
  return std::numeric_limits<float>::quiet_NaN();
#endif
}
template <>
VISDET_HOST_DEVICE VISDET_INLINE double quiet_nan<double>() {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(0x7ff8000000000000LL);
#else
  return std::numeric_limits<double>::quiet_NaN();
#endif
}

}  // namespace visdet_ops
