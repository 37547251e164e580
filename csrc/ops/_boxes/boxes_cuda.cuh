// The CUDA bitmask NMS that nms and nms_rotated share, each with its own
// suppression test: the layout of the suppression mask, the scratch it needs
// and the greedy walk over it on the device (no device-to-host copy of the
// mask). Torch-free; included by those families' .cu files only. Everything
// is in an anonymous namespace: each .cu file gets its own copy of the kernel.
//
// The mask: n rows (boxes in descending score order) of col_blocks 64-bit
// words; mask[i * col_blocks + c] bit b says that row i claims (suppresses)
// row c * 64 + b, which comes after i. A mask kernel must write every word
// c >= i / 64 of row i (the diagonal word's bits for rows <= i are 0); the
// walk reads no other word.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/cuda_helpers.cuh"
#include "common/macros.h"

namespace visdet_ops {
namespace nms_mask {
namespace {

constexpr int kBoxesPerBlock = 64;  // one bit per box in a 64-bit word
// Above this many mask words per row the "removed" bitset lives in global
// memory instead of shared memory (48 KiB: 6144 words, 393216 boxes).
constexpr int64_t kMaxSharedWords = 6144;
// The walk's launch has one block per 64 boxes in grid.x of the mask kernels
// (nms: grid.x and grid.y), and the walk counts (kept row, word) pairs in int.
constexpr int64_t kMaxColBlocks = 65535;

// Number of 64-bit mask words per row for n boxes.
inline int64_t col_blocks(int64_t n) {
  return (n + kBoxesPerBlock - 1) / kBoxesPerBlock;
}

// 64-bit words of scratch the mask and the walk need: the n x col_blocks
// mask, then, for very large n, the walk's global "removed" bitset.
inline int64_t workspace_words(int64_t n) {
  const int64_t blocks = col_blocks(n);
  return n * blocks + (blocks > kMaxSharedWords ? blocks : 0);
}

// Greedy walk over the mask in box order, one 64-box block at a time, in one
// thread block. Per 64-box block: its rows' diagonal words (and their input
// indices) are staged in shared memory, thread 0 resolves the block serially
// from them (which rows are kept), then all threads OR the kept rows into the
// later "removed" words, spread over (kept row, word) pairs so that the loads
// run in parallel. Three barriers per 64 boxes, not per kept box. Being
// sequential, thread 0 also compacts the kept indices.
// order == nullptr writes sorted positions instead of input indices.
__global__ void nms_walk_kernel(const uint64_t* __restrict__ mask,
                                const int64_t* __restrict__ order, int64_t n,
                                int64_t col_blocks, uint64_t* global_removed,
                                int64_t* __restrict__ kept,
                                int64_t* __restrict__ num_kept) {
  extern __shared__ uint64_t shared_removed[];
  __shared__ uint64_t diagonal[kBoxesPerBlock];
  __shared__ int64_t block_order[kBoxesPerBlock];
  __shared__ int kept_rows[kBoxesPerBlock];
  __shared__ int num_kept_rows;
  uint64_t* removed = global_removed != nullptr ? global_removed : shared_removed;
  for (int64_t w = threadIdx.x; w < col_blocks; w += blockDim.x) removed[w] = 0;
  int64_t count = 0;  // meaningful in thread 0 only

  for (int64_t block = 0; block < col_blocks; ++block) {
    const int64_t base = block * kBoxesPerBlock;
    const int rows = static_cast<int>(min_of<int64_t>(n - base, kBoxesPerBlock));
    if (threadIdx.x < rows) {
      diagonal[threadIdx.x] = mask[(base + threadIdx.x) * col_blocks + block];
      block_order[threadIdx.x] =
          order != nullptr ? order[base + threadIdx.x] : base + threadIdx.x;
    }
    __syncthreads();  // staged; removed[block] final
    if (threadIdx.x == 0) {
      uint64_t gone = removed[block];
      int k = 0;
      for (int bit = 0; bit < rows; ++bit) {
        if (gone & (1ULL << bit)) continue;
        kept_rows[k++] = bit;
        kept[count++] = block_order[bit];
        gone |= diagonal[bit];
      }
      num_kept_rows = k;
    }
    __syncthreads();  // kept_rows published
    // int: words <= 65535 (grid limit checked by the launcher), so
    // pairs <= 64 * 65535.
    const int64_t first = block + 1;
    const int words = static_cast<int>(col_blocks - first);
    const int pairs = words * num_kept_rows;
    for (int p = threadIdx.x; p < pairs; p += blockDim.x) {
      const int64_t w = first + p % words;
      const uint64_t bits = mask[(base + kept_rows[p / words]) * col_blocks + w];
      if (bits != 0) {
        atomicOr(reinterpret_cast<unsigned long long*>(removed + w),
                 static_cast<unsigned long long>(bits));
      }
    }
    __syncthreads();  // removed[block + 1] final; staging buffers free
  }
  if (threadIdx.x == 0) *num_kept = count;
}

// The walk over the mask in workspace (workspace_words(n) words, the mask
// first), writing the kept rows' order[] values (sorted positions when order
// is nullptr) to kept[0, *num_kept) and their count to *num_kept.
inline cudaError_t launch_walk(uint64_t* workspace, const int64_t* order,
                               int64_t n, int64_t* kept, int64_t* num_kept,
                               cudaStream_t stream) {
  const int64_t blocks = col_blocks(n);
  if (n == 0 || blocks > kMaxColBlocks) return cudaErrorInvalidValue;
  uint64_t* global_removed =
      blocks > kMaxSharedWords ? workspace + n * blocks : nullptr;
  // At least 64 threads (they stage the 64 diagonal words); up to 16 per mask
  // word for the (kept row, word) pairs.
  const int threads = static_cast<int>(min_of<int64_t>(
      max_of<int64_t>((blocks * 16 + 31) / 32 * 32, kBoxesPerBlock), 1024));
  const size_t shared_bytes =
      global_removed != nullptr ? 0 : blocks * sizeof(uint64_t);
  nms_walk_kernel<<<1, threads, shared_bytes, stream>>>(
      workspace, order, n, blocks, global_removed, kept, num_kept);
  return cudaGetLastError();
}

}  // namespace
}  // namespace nms_mask
}  // namespace visdet_ops
