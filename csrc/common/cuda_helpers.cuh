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

#define VISDET_GRID_STRIDE_LOOP(i, n)                                        \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x +          \
                   threadIdx.x;                                              \
       i < (n); i += static_cast<int64_t>(blockDim.x) * gridDim.x)

}  // namespace cuda
}  // namespace visdet_ops
