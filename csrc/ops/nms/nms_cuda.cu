// CUDA NMS: a block-pair kernel builds the n x ceil(n/64) suppression bitmask,
// then one block walks it on the device (no device-to-host copy of the mask).
#include <cstdint>

#include "common/cuda_helpers.cuh"
#include "nms_kernel.h"
#include "nms_launch.h"

namespace visdet_ops {
namespace {

constexpr int kBoxesPerBlock = 64;  // one bit per box in a 64-bit word
// Above this many mask words per row the "removed" bitset lives in global
// memory instead of shared memory (48 KiB: 6144 words, 393216 boxes).
constexpr int64_t kMaxSharedWords = 6144;

template <typename T>
__global__ void nms_mask_kernel(const T* __restrict__ boxes, int64_t n,
                                T iou_threshold, T offset,
                                uint64_t* __restrict__ mask,
                                int64_t col_blocks) {
  const int64_t row_block = blockIdx.y;
  const int64_t col_block = blockIdx.x;
  // Only pairs (i, j) with j after i are needed: the walk reads words >= the
  // row's own block.
  if (row_block > col_block) return;

  const int64_t row_start = row_block * kBoxesPerBlock;
  const int64_t col_start = col_block * kBoxesPerBlock;
  const int row_size =
      static_cast<int>(min_of<int64_t>(n - row_start, kBoxesPerBlock));
  const int col_size =
      static_cast<int>(min_of<int64_t>(n - col_start, kBoxesPerBlock));

  __shared__ T block_boxes[kBoxesPerBlock * 4];
  if (threadIdx.x < col_size) {
    for (int k = 0; k < 4; ++k) {
      block_boxes[threadIdx.x * 4 + k] = boxes[(col_start + threadIdx.x) * 4 + k];
    }
  }
  __syncthreads();

  if (threadIdx.x < row_size) {
    const int64_t i = row_start + threadIdx.x;
    T cur[4];
    for (int k = 0; k < 4; ++k) cur[k] = boxes[i * 4 + k];
    uint64_t bits = 0;
    const int first = (row_block == col_block) ? threadIdx.x + 1 : 0;
    for (int j = first; j < col_size; ++j) {
      if (nms_detail::suppresses(cur, block_boxes + j * 4, iou_threshold,
                                 offset)) {
        bits |= 1ULL << j;
      }
    }
    mask[i * col_blocks + col_block] = bits;
  }
}

// Sequential in box order, parallel across mask words: one block. Threads
// synchronise only after a kept box, so the cost is ~(#kept) barriers. Being
// sequential, it also compacts the output for free: thread 0 appends each
// kept box's input index, so no mask-to-index pass is needed afterwards.
__global__ void nms_walk_kernel(const uint64_t* __restrict__ mask,
                                const int64_t* __restrict__ order, int64_t n,
                                int64_t col_blocks, uint64_t* global_removed,
                                int64_t* __restrict__ kept,
                                int64_t* __restrict__ num_kept) {
  extern __shared__ uint64_t shared_removed[];
  uint64_t* removed = global_removed != nullptr ? global_removed : shared_removed;
  for (int64_t w = threadIdx.x; w < col_blocks; w += blockDim.x) removed[w] = 0;
  __syncthreads();
  int64_t count = 0;  // meaningful in thread 0 only

  for (int64_t block = 0; block < col_blocks; ++block) {
    uint64_t removed_word = removed[block];
    __syncthreads();
    const int64_t base = block * kBoxesPerBlock;
    for (int bit = 0; bit < kBoxesPerBlock; ++bit) {
      const int64_t i = base + bit;
      if (i >= n) break;
      if (removed_word & (1ULL << bit)) continue;
      if (threadIdx.x == 0) kept[count++] = order[i];
      const uint64_t* row = mask + i * col_blocks;
      for (int64_t w = block + threadIdx.x; w < col_blocks; w += blockDim.x) {
        removed[w] |= row[w];
      }
      __syncthreads();
      removed_word = removed[block];
      // All threads must have read removed[block] before anyone writes it
      // again for the next kept box.
      __syncthreads();
    }
  }
  if (threadIdx.x == 0) *num_kept = count;
}

}  // namespace

int64_t nms_cuda_col_blocks(int64_t n) {
  return (n + kBoxesPerBlock - 1) / kBoxesPerBlock;
}

int64_t nms_cuda_workspace_bytes(int64_t n) {
  const int64_t col_blocks = nms_cuda_col_blocks(n);
  int64_t words = n * col_blocks;
  if (col_blocks > kMaxSharedWords) words += col_blocks;
  return words * static_cast<int64_t>(sizeof(uint64_t));
}

template <typename T>
cudaError_t nms_cuda_launch(const T* boxes_sorted, const int64_t* order,
                            int64_t n, T iou_threshold, T offset,
                            int64_t* kept, int64_t* num_kept, void* workspace,
                            cudaStream_t stream) {
  if (n == 0) return cudaErrorInvalidValue;  // the caller handles empty input
  const int64_t col_blocks = nms_cuda_col_blocks(n);
  if (col_blocks > 65535) return cudaErrorInvalidValue;  // grid.y limit
  uint64_t* mask = static_cast<uint64_t*>(workspace);
  uint64_t* global_removed =
      col_blocks > kMaxSharedWords ? mask + n * col_blocks : nullptr;

  const dim3 grid(static_cast<unsigned int>(col_blocks),
                  static_cast<unsigned int>(col_blocks));
  nms_mask_kernel<T><<<grid, kBoxesPerBlock, 0, stream>>>(
      boxes_sorted, n, iou_threshold, offset, mask, col_blocks);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;

  const int threads = static_cast<int>(min_of<int64_t>(
      max_of<int64_t>((col_blocks + 31) / 32 * 32, 32), 1024));
  const size_t shared_bytes =
      global_removed != nullptr ? 0 : col_blocks * sizeof(uint64_t);
  nms_walk_kernel<<<1, threads, shared_bytes, stream>>>(
      mask, order, n, col_blocks, global_removed, kept, num_kept);
  return cudaGetLastError();
}

template cudaError_t nms_cuda_launch<float>(const float*, const int64_t*,
                                            int64_t, float, float, int64_t*,
                                            int64_t*, void*, cudaStream_t);
template cudaError_t nms_cuda_launch<double>(const double*, const int64_t*,
                                             int64_t, double, double,
                                             int64_t*, int64_t*, void*,
                                             cudaStream_t);

}  // namespace visdet_ops
