// Torch-free CUDA helpers: included only by .cu files.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace visdet_ops {
namespace cuda {

constexpr int kThreadsPerBlock = 256;

// Grid for a grid-stride loop over n elements. Capped so huge inputs still
// launch (the loop covers the rest); 64-bit n is fine.
inline unsigned int blocks_for(int64_t n, int threads = kThreadsPerBlock) {
  const int64_t max_blocks = 65535LL * 8;
  int64_t blocks = (n + threads - 1) / threads;
  if (blocks < 1) blocks = 1;
  if (blocks > max_blocks) blocks = max_blocks;
  return static_cast<unsigned int>(blocks);
}

// Calls body(i) for i in [0, n) across the whole grid. I is the index type:
// int32_t where the caller has checked that n plus one grid stride fits
// (integer division is much cheaper in 32 bits), int64_t otherwise.
template <typename I, typename Body>
__device__ __forceinline__ void grid_stride_loop(I n, Body body) {
  const I stride = static_cast<I>(blockDim.x) * static_cast<I>(gridDim.x);
  for (I i = static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) +
             static_cast<I>(threadIdx.x);
       i < n; i += stride) {
    body(i);
  }
}

// Bytes of L2 cache of the current device, 0 where the runtime cannot say (the
// failed query's error is cleared, so the caller's launch check does not
// report it).
inline int64_t l2_cache_bytes() {
  int device = 0, bytes = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&bytes, cudaDevAttrL2CacheSize, device) !=
          cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return bytes;
}

// MACRO(T) for every storage type the kernels take: float, double, __half and
// __nv_bfloat16 (each .cu file instantiates its launchers with it).
#define VISDET_FOR_FLOATING_TYPES(MACRO) \
  MACRO(float)                           \
  MACRO(double)                          \
  MACRO(__half)                          \
  MACRO(__nv_bfloat16)

// Largest n for which an int32_t grid-stride loop launched with blocks_for(n)
// cannot overflow its loop variable.
constexpr int64_t kMaxInt32LoopSize =
    ((int64_t{1} << 31) - 1) - 65535LL * 8 * kThreadsPerBlock;

}  // namespace cuda
}  // namespace visdet_ops
