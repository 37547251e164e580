// Torch-free helpers shared by host (CPU) and device (CUDA) code.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define VISDET_HOST_DEVICE __host__ __device__
#define VISDET_INLINE __forceinline__
#else
#define VISDET_HOST_DEVICE
#define VISDET_INLINE inline
#endif

namespace visdet_ops {

// Most negative finite value; std::numeric_limits is not usable in device code
// without --expt-relaxed-constexpr, which we keep off.
template <typename T>
VISDET_HOST_DEVICE VISDET_INLINE T lowest_value();
template <>
VISDET_HOST_DEVICE VISDET_INLINE float lowest_value<float>() {
  return -3.402823466e+38F;
}
template <>
VISDET_HOST_DEVICE VISDET_INLINE double lowest_value<double>() {
  return -1.7976931348623157e+308;
}

template <typename T>
VISDET_HOST_DEVICE VISDET_INLINE T max_of(T a, T b) {
  return a > b ? a : b;
}
template <typename T>
VISDET_HOST_DEVICE VISDET_INLINE T min_of(T a, T b) {
  return a < b ? a : b;
}

}  // namespace visdet_ops
