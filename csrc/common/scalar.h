// Storage type vs compute type of the floating-point kernels. Torch-free,
// usable on host and device.
//
// float and double compute in themselves. Half and bfloat16 are stored as
// __half / __nv_bfloat16 in CUDA code, HostHalf / HostBFloat16 in CPU code,
// and computed in float: load with to_acc,
// store with from_acc (the cuda_fp16/cuda_bf16 intrinsics, so the kernels do
// not depend on the implicit conversions that torch's nvcc flags switch off).
#pragma once

#include <cstdint>
#include <cstring>
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

#if !defined(__CUDACC__)
// float16 and bfloat16 storage on the CPU: the raw bits, layout-compatible with
// c10::Half / c10::BFloat16 (the host layer hands their data pointers over
// reinterpret_cast, as it does __half for CUDA). Loaded to float and stored back
// with round-to-nearest-even, the same arithmetic as c10's conversions (the
// FP16 library's bit-exact algorithm for float16), so the CPU kernels can read
// 16-bit tensors directly and compute in float like the CUDA ones. Host code
// only: nvcc never sees these types.
struct HostHalf {
  uint16_t bits;
};
struct HostBFloat16 {
  uint16_t bits;
};

// MACRO(T) for every storage type a 16-bit-capable CPU kernel takes: float,
// double, HostHalf and HostBFloat16 (such a *_cpu.cpp instantiates its loops
// with it; cuda_helpers.cuh's VISDET_FOR_FLOATING_TYPES is the CUDA side's).
#define VISDET_FOR_HOST_FLOATING_TYPES(MACRO) \
  MACRO(float)                                \
  MACRO(double)                               \
  MACRO(HostHalf)                             \
  MACRO(HostBFloat16)

namespace scalar_detail {
inline float float_from_bits(uint32_t w) {
  float f;
  std::memcpy(&f, &w, sizeof f);
  return f;
}
inline uint32_t float_to_bits(float f) {
  uint32_t w;
  std::memcpy(&w, &f, sizeof w);
  return w;
}
}  // namespace scalar_detail

template <>
struct ScalarOps<HostHalf> {
  using acc = float;
  static inline float load(HostHalf h) {
    using namespace scalar_detail;
    const uint32_t w = static_cast<uint32_t>(h.bits) << 16;
    const uint32_t sign = w & UINT32_C(0x80000000);
    const uint32_t two_w = w + w;
    const uint32_t exp_offset = UINT32_C(0xE0) << 23;
    const float exp_scale = 0x1.0p-112f;
    const float normalized = float_from_bits((two_w >> 4) + exp_offset) * exp_scale;
    const uint32_t magic_mask = UINT32_C(126) << 23;
    const float magic_bias = 0.5f;
    const float denormalized = float_from_bits((two_w >> 17) | magic_mask) - magic_bias;
    const uint32_t denormalized_cutoff = UINT32_C(1) << 27;
    return float_from_bits(sign | (two_w < denormalized_cutoff ? float_to_bits(denormalized)
                                                               : float_to_bits(normalized)));
  }
  static inline HostHalf store(float f) {
    using namespace scalar_detail;
    const float scale_to_inf = 0x1.0p+112f;
    const float scale_to_zero = 0x1.0p-110f;
    float base = ((f < 0 ? -f : f) * scale_to_inf) * scale_to_zero;
    const uint32_t w = float_to_bits(f);
    const uint32_t shl1_w = w + w;
    const uint32_t sign = w & UINT32_C(0x80000000);
    uint32_t bias = shl1_w & UINT32_C(0xFF000000);
    if (bias < UINT32_C(0x71000000)) bias = UINT32_C(0x71000000);
    base = float_from_bits((bias >> 1) + UINT32_C(0x07800000)) + base;
    const uint32_t bits = float_to_bits(base);
    const uint32_t exp_bits = (bits >> 13) & UINT32_C(0x00007C00);
    const uint32_t mantissa_bits = bits & UINT32_C(0x00000FFF);
    const uint32_t nonsign = exp_bits + mantissa_bits;
    return HostHalf{static_cast<uint16_t>(
        (sign >> 16) | (shl1_w > UINT32_C(0xFF000000) ? UINT32_C(0x7E00) : nonsign))};
  }
};

template <>
struct ScalarOps<HostBFloat16> {
  using acc = float;
  static inline float load(HostBFloat16 h) {
    return scalar_detail::float_from_bits(static_cast<uint32_t>(h.bits) << 16);
  }
  static inline HostBFloat16 store(float f) {
    if (f != f) return HostBFloat16{UINT16_C(0x7FC0)};
    const uint32_t w = scalar_detail::float_to_bits(f);
    const uint32_t rounding_bias = ((w >> 16) & 1) + UINT32_C(0x7FFF);
    return HostBFloat16{static_cast<uint16_t>((w + rounding_bias) >> 16)};
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
