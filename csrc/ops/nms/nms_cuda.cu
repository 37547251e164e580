// CUDA NMS: a block-pair kernel builds the n x ceil(n/64) suppression bitmask,
// then one block walks it on the device (no device-to-host copy of the mask),
// 64 boxes at a time (the walk: ops/_boxes/boxes_cuda.cuh, shared with
// nms_rotated). nms_match reuses both and adds a leader pass.
#include <cstdint>

#include "common/cuda_helpers.cuh"
#include "nms_kernel.h"
#include "nms_launch.h"
#include "ops/_boxes/boxes_cuda.cuh"

namespace visdet_ops {
namespace {

using nms_mask::kBoxesPerBlock;

// The mask of ops/_boxes/boxes_cuda.cuh: mask[i * col_blocks + c] bit b: row i
// claims row c * 64 + b (which comes after i). Only words c >= i / 64 are
// written; the walk reads no others.
template <bool Inclusive, typename T>
__global__ void nms_mask_kernel(const T* __restrict__ boxes,
                                const int64_t* __restrict__ classes, int64_t n,
                                T iou_threshold, T offset,
                                uint64_t* __restrict__ mask,
                                int64_t col_blocks) {
  const int64_t row_block = blockIdx.y;
  const int64_t col_block = blockIdx.x;
  if (row_block > col_block) return;

  const int64_t row_start = row_block * kBoxesPerBlock;
  const int64_t col_start = col_block * kBoxesPerBlock;
  const int row_size =
      static_cast<int>(min_of<int64_t>(n - row_start, kBoxesPerBlock));
  const int col_size =
      static_cast<int>(min_of<int64_t>(n - col_start, kBoxesPerBlock));

  __shared__ T block_boxes[kBoxesPerBlock * 4];
  __shared__ int64_t block_classes[kBoxesPerBlock];
  if (threadIdx.x < col_size) {
    for (int k = 0; k < 4; ++k) {
      block_boxes[threadIdx.x * 4 + k] = boxes[(col_start + threadIdx.x) * 4 + k];
    }
    if (classes != nullptr) {
      block_classes[threadIdx.x] = classes[col_start + threadIdx.x];
    }
  }
  __syncthreads();

  if (threadIdx.x < row_size) {
    const int64_t i = row_start + threadIdx.x;
    T cur[4];
    for (int k = 0; k < 4; ++k) cur[k] = boxes[i * 4 + k];
    const int64_t cur_class = classes != nullptr ? classes[i] : 0;
    uint64_t bits = 0;
    const int first = (row_block == col_block) ? threadIdx.x + 1 : 0;
    for (int j = first; j < col_size; ++j) {
      if (classes != nullptr && block_classes[j] != cur_class) continue;
      if (nms_detail::overlaps<Inclusive>(cur, block_boxes + j * 4,
                                          iou_threshold, offset)) {
        bits |= 1ULL << j;
      }
    }
    mask[i * col_blocks + col_block] = bits;
  }
}

// nms_match: row j's leader is the first kept row before it that claims it
// (mmcv's loop assigns j to the first kept box that overlaps it), j itself
// when kept. kept: sorted positions, ascending, count in kept[n].
__global__ void nms_leader_kernel(const uint64_t* __restrict__ mask,
                                  const int64_t* __restrict__ kept, int64_t n,
                                  int64_t col_blocks,
                                  int64_t* __restrict__ leader) {
  const int64_t num_kept = kept[n];
  cuda::grid_stride_loop<int64_t>(n, [&](int64_t j) {
    const int64_t word = j / kBoxesPerBlock;
    const uint64_t bit = 1ULL << (j % kBoxesPerBlock);
    int64_t found = j;  // reached only if j is kept
    for (int64_t t = 0; t < num_kept; ++t) {
      const int64_t k = kept[t];
      if (k >= j) break;
      if (mask[k * col_blocks + word] & bit) {
        found = k;
        break;
      }
    }
    leader[j] = found;
  });
}

template <bool Inclusive, typename T>
cudaError_t mask_and_walk(const T* boxes_sorted, const int64_t* classes_sorted,
                          const int64_t* order, int64_t n, T iou_threshold,
                          T offset, int64_t* kept, int64_t* num_kept,
                          void* workspace, cudaStream_t stream) {
  if (n == 0) return cudaErrorInvalidValue;  // the caller handles empty input
  const int64_t col_blocks = nms_cuda_col_blocks(n);
  if (col_blocks > 65535) return cudaErrorInvalidValue;  // grid.y limit
  uint64_t* mask = static_cast<uint64_t*>(workspace);

  const dim3 grid(static_cast<unsigned int>(col_blocks),
                  static_cast<unsigned int>(col_blocks));
  nms_mask_kernel<Inclusive, T><<<grid, kBoxesPerBlock, 0, stream>>>(
      boxes_sorted, classes_sorted, n, iou_threshold, offset, mask,
      col_blocks);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  return nms_mask::launch_walk(mask, order, n, kept, num_kept, stream);
}

}  // namespace

int64_t nms_cuda_col_blocks(int64_t n) { return nms_mask::col_blocks(n); }

int64_t nms_cuda_workspace_bytes(int64_t n) {
  return nms_mask::workspace_words(n) * static_cast<int64_t>(sizeof(uint64_t));
}

template <typename T>
cudaError_t nms_cuda_launch(const T* boxes_sorted,
                            const int64_t* classes_sorted,
                            const int64_t* order, int64_t n, T iou_threshold,
                            T offset, int64_t* kept, int64_t* num_kept,
                            void* workspace, cudaStream_t stream) {
  return mask_and_walk<false, T>(boxes_sorted, classes_sorted, order, n,
                                 iou_threshold, offset, kept, num_kept,
                                 workspace, stream);
}

template <typename T>
cudaError_t nms_match_cuda_launch(const T* boxes_sorted, int64_t n,
                                  T iou_threshold, int64_t* leader,
                                  int64_t* kept_scratch, void* workspace,
                                  cudaStream_t stream) {
  cudaError_t err = mask_and_walk<true, T>(
      boxes_sorted, nullptr, nullptr, n, iou_threshold, T(0), kept_scratch,
      kept_scratch + n, workspace, stream);
  if (err != cudaSuccess) return err;
  nms_leader_kernel<<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0,
                      stream>>>(static_cast<const uint64_t*>(workspace),
                                kept_scratch, n, nms_cuda_col_blocks(n),
                                leader);
  return cudaGetLastError();
}

#define VISDET_INSTANTIATE_NMS(T)                                            \
  template cudaError_t nms_cuda_launch<T>(const T*, const int64_t*,          \
                                          const int64_t*, int64_t, T, T,     \
                                          int64_t*, int64_t*, void*,         \
                                          cudaStream_t);                     \
  template cudaError_t nms_match_cuda_launch<T>(                             \
      const T*, int64_t, T, int64_t*, int64_t*, void*, cudaStream_t);
VISDET_INSTANTIATE_NMS(float)
VISDET_INSTANTIATE_NMS(double)
#undef VISDET_INSTANTIATE_NMS

}  // namespace visdet_ops
