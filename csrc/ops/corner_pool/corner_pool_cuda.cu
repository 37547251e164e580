// CUDA corner pooling: one thread scans one lane.
// H pools (top, bottom): neighbouring threads own neighbouring columns, so
// every step is a coalesced row access straight from global memory.
// W pools (left, right; inner == 1): a block of kRows threads owns kRows rows
// and walks them in 32-column chunks staged through shared memory: the block
// loads a chunk with coalesced 128-byte row segments, each thread scans its
// row's 32 values on chip, and the block stores the chunk coalesced again.
#include <cstdint>

#include "common/cuda_helpers.cuh"
#include "common/scalar.h"
#include "corner_pool_kernel.h"
#include "corner_pool_launch.h"

namespace visdet_ops {
namespace {

using corner_pool_detail::takes_over;

template <typename T>
__global__ void corner_pool_forward_kernel(const T* __restrict__ input,
                                           CornerPoolShape s,
                                           T* __restrict__ output) {
  using A = acc_t<T>;
  const int64_t L = s.length, inner = s.inner;
  cuda::grid_stride_loop<int64_t>(s.outer * inner, [&](int64_t lane) {
    const int64_t o = lane / inner, i = lane - o * inner;
    const int64_t base = o * L * inner + i;
    T best_raw = input[base];
    A best = to_acc(best_raw);
    for (int64_t step = 0; step < L; ++step) {
      const int64_t off = base + (s.reverse ? L - 1 - step : step) * inner;
      const T raw = input[off];
      const A x = to_acc(raw);
      if (step == 0 || takes_over(x, best)) {
        best = x;
        best_raw = raw;
      }
      output[off] = best_raw;
    }
  });
}

template <typename T>
__global__ void corner_pool_backward_kernel(const T* __restrict__ grad_output,
                                            const T* __restrict__ input,
                                            CornerPoolShape s,
                                            T* __restrict__ grad_input) {
  using A = acc_t<T>;
  const int64_t L = s.length, inner = s.inner;
  cuda::grid_stride_loop<int64_t>(s.outer * inner, [&](int64_t lane) {
    const int64_t o = lane / inner, i = lane - o * inner;
    const int64_t base = o * L * inner + i;
    A best = A(0), acc = A(0);
    int64_t arg = base;
    for (int64_t step = 0; step < L; ++step) {
      const int64_t off = base + (s.reverse ? L - 1 - step : step) * inner;
      const A x = to_acc(input[off]);
      if (step == 0 || takes_over(x, best)) {
        if (step != 0) grad_input[arg] = from_acc<T>(acc);
        best = x;
        arg = off;
        acc = A(0);
      }
      acc += to_acc(grad_output[off]);
    }
    if (L > 0) grad_input[arg] = from_acc<T>(acc);
  });
}

constexpr int kRows = 64;
constexpr int kCols = 32;

// Loads the chunk [row0, row0 + kRows) x [col0, col0 + kCols) of a row-major
// [rows, L] array into tile (float or double; exact for the 16-bit types).
template <typename T, typename A>
__device__ __forceinline__ void load_chunk(const T* __restrict__ src,
                                           int64_t rows, int64_t L,
                                           int64_t row0, int64_t col0,
                                           A (*tile)[kCols + 1]) {
  for (int t = threadIdx.x; t < kRows * kCols; t += kRows) {
    const int r = t / kCols, c = t % kCols;
    const int64_t row = row0 + r, col = col0 + c;
    if (row < rows && col < L) tile[r][c] = to_acc(src[row * L + col]);
  }
}

template <typename T>
__global__ void __launch_bounds__(kRows)
    corner_pool_rows_forward_kernel(const T* __restrict__ input,
                                    CornerPoolShape s, T* __restrict__ output) {
  using A = acc_t<T>;
  __shared__ A tile[kRows][kCols + 1];
  const int64_t L = s.length, rows = s.outer;
  const int64_t chunks = (L + kCols - 1) / kCols;
  for (int64_t row0 = static_cast<int64_t>(blockIdx.x) * kRows; row0 < rows;
       row0 += static_cast<int64_t>(gridDim.x) * kRows) {
    const bool mine = row0 + threadIdx.x < rows;
    A best = A(0);
    for (int64_t ci = 0; ci < chunks; ++ci) {
      const int64_t col0 = (s.reverse ? chunks - 1 - ci : ci) * kCols;
      const int ncols = static_cast<int>(L - col0 < kCols ? L - col0 : kCols);
      load_chunk(input, rows, L, row0, col0, tile);
      __syncthreads();
      if (mine) {
        A* row = tile[threadIdx.x];
        for (int k = 0; k < ncols; ++k) {
          const int c = s.reverse ? ncols - 1 - k : k;
          if ((ci == 0 && k == 0) || takes_over(row[c], best)) best = row[c];
          row[c] = best;
        }
      }
      __syncthreads();
      for (int t = threadIdx.x; t < kRows * kCols; t += kRows) {
        const int r = t / kCols, c = t % kCols;
        const int64_t row = row0 + r, col = col0 + c;
        if (row < rows && col < L) output[row * L + col] = from_acc<T>(tile[r][c]);
      }
      __syncthreads();
    }
  }
}

// grad_input zeroed by the caller; a position's gradient is written (by its
// row's thread) when the running maximum moves past it.
template <typename T>
__global__ void __launch_bounds__(kRows)
    corner_pool_rows_backward_kernel(const T* __restrict__ grad_output,
                                     const T* __restrict__ input,
                                     CornerPoolShape s,
                                     T* __restrict__ grad_input) {
  using A = acc_t<T>;
  __shared__ A tile_in[kRows][kCols + 1];
  __shared__ A tile_grad[kRows][kCols + 1];
  const int64_t L = s.length, rows = s.outer;
  const int64_t chunks = (L + kCols - 1) / kCols;
  for (int64_t row0 = static_cast<int64_t>(blockIdx.x) * kRows; row0 < rows;
       row0 += static_cast<int64_t>(gridDim.x) * kRows) {
    const int64_t my_row = row0 + threadIdx.x;
    const bool mine = my_row < rows;
    A best = A(0), acc = A(0);
    int64_t arg = 0;
    for (int64_t ci = 0; ci < chunks; ++ci) {
      const int64_t col0 = (s.reverse ? chunks - 1 - ci : ci) * kCols;
      const int ncols = static_cast<int>(L - col0 < kCols ? L - col0 : kCols);
      load_chunk(input, rows, L, row0, col0, tile_in);
      load_chunk(grad_output, rows, L, row0, col0, tile_grad);
      __syncthreads();
      if (mine) {
        for (int k = 0; k < ncols; ++k) {
          const int c = s.reverse ? ncols - 1 - k : k;
          const A x = tile_in[threadIdx.x][c];
          const bool first = ci == 0 && k == 0;
          if (first || takes_over(x, best)) {
            if (!first) grad_input[my_row * L + arg] = from_acc<T>(acc);
            best = x;
            arg = col0 + c;
            acc = A(0);
          }
          acc += tile_grad[threadIdx.x][c];
        }
      }
      __syncthreads();
    }
    if (mine && L > 0) grad_input[my_row * L + arg] = from_acc<T>(acc);
  }
}

unsigned int row_blocks(int64_t rows) {
  int64_t blocks = (rows + kRows - 1) / kRows;
  const int64_t max_blocks = 65535LL * 8;
  if (blocks > max_blocks) blocks = max_blocks;
  return static_cast<unsigned int>(blocks < 1 ? 1 : blocks);
}

}  // namespace

template <typename T>
cudaError_t corner_pool_forward_cuda_launch(const T* input,
                                            const CornerPoolShape& s,
                                            T* output, cudaStream_t stream) {
  const int64_t lanes = s.lanes();
  if (lanes == 0 || s.length == 0) return cudaSuccess;
  if (s.inner == 1) {
    corner_pool_rows_forward_kernel<T>
        <<<row_blocks(s.outer), kRows, 0, stream>>>(input, s, output);
  } else {
    corner_pool_forward_kernel<T>
        <<<cuda::blocks_for(lanes), cuda::kThreadsPerBlock, 0, stream>>>(
            input, s, output);
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t corner_pool_backward_cuda_launch(const T* grad_output,
                                             const T* input,
                                             const CornerPoolShape& s,
                                             T* grad_input,
                                             cudaStream_t stream) {
  const int64_t lanes = s.lanes();
  if (lanes == 0 || s.length == 0) return cudaSuccess;
  if (s.inner == 1) {
    corner_pool_rows_backward_kernel<T>
        <<<row_blocks(s.outer), kRows, 0, stream>>>(grad_output, input, s,
                                                    grad_input);
  } else {
    corner_pool_backward_kernel<T>
        <<<cuda::blocks_for(lanes), cuda::kThreadsPerBlock, 0, stream>>>(
            grad_output, input, s, grad_input);
  }
  return cudaGetLastError();
}

#define VISDET_INSTANTIATE(T)                                                \
  template cudaError_t corner_pool_forward_cuda_launch<T>(                   \
      const T*, const CornerPoolShape&, T*, cudaStream_t);                   \
  template cudaError_t corner_pool_backward_cuda_launch<T>(                  \
      const T*, const T*, const CornerPoolShape&, T*, cudaStream_t);
VISDET_FOR_FLOATING_TYPES(VISDET_INSTANTIATE)
#undef VISDET_INSTANTIATE

}  // namespace visdet_ops
