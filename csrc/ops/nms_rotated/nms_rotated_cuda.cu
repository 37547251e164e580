// Rotated NMS on CUDA: every box's geometry is computed once (the
// trigonometry, the circumscribed circle), then one 64-thread block per tile
// of the upper triangle of 64 x 64 tiles (only pairs i < j are ever tested)
// fills the suppression bitmask of ops/_boxes/boxes_cuda.cuh, and one block
// walks it on the device, as nms does (no device-to-host copy of the mask).
// Most pairs of a detector's boxes are far apart: the circumscribed-circle
// reject answers them without clipping.
#include <cmath>
#include <cstdint>

#include "common/cuda_helpers.cuh"
#include "nms_rotated_kernel.h"
#include "nms_rotated_launch.h"
#include "ops/_boxes/boxes_cuda.cuh"

namespace visdet_ops {
namespace {

using nms_mask::kBoxesPerBlock;
using rotated_detail::RotatedBox;

template <typename T>
// clockwise is an int, not a bool: PTX loads a bool parameter as s8 on x86_64 and u8 on aarch64.
__global__ void geometry_kernel(const T* __restrict__ boxes, int64_t n,
                                int clockwise, RotatedBox<T>* __restrict__ out) {
  cuda::grid_stride_loop<int64_t>(n, [&](int64_t i) {
    out[i] = rotated_detail::load_box(boxes + 5 * i, clockwise != 0);
  });
}

// Block k of the grid is tile (row block r, column block c), r <= c, of the
// upper triangle, numbered column by column: c(c + 1) / 2 + r.
__device__ __forceinline__ void triangle_tile(int64_t k, int64_t* row,
                                              int64_t* col) {
  int64_t c = static_cast<int64_t>((sqrt(8.0 * static_cast<double>(k) + 1.0) - 1.0) / 2.0);
  while (c * (c + 1) / 2 > k) --c;
  while ((c + 1) * (c + 2) / 2 <= k) ++c;
  *col = c;
  *row = k - c * (c + 1) / 2;
}

template <typename T>
__global__ void nms_rotated_mask_kernel(const RotatedBox<T>* __restrict__ boxes,
                                        const int64_t* __restrict__ classes,
                                        int64_t n, T iou_threshold,
                                        uint64_t* __restrict__ mask,
                                        int64_t col_blocks) {
  int64_t row_block, col_block;
  triangle_tile(blockIdx.x, &row_block, &col_block);
  const int64_t row_start = row_block * kBoxesPerBlock;
  const int64_t col_start = col_block * kBoxesPerBlock;
  const int row_size =
      static_cast<int>(min_of<int64_t>(n - row_start, kBoxesPerBlock));
  const int col_size =
      static_cast<int>(min_of<int64_t>(n - col_start, kBoxesPerBlock));

  __shared__ RotatedBox<T> block_boxes[kBoxesPerBlock];
  __shared__ int64_t block_classes[kBoxesPerBlock];
  if (threadIdx.x < col_size) {
    block_boxes[threadIdx.x] = boxes[col_start + threadIdx.x];
    if (classes != nullptr) {
      block_classes[threadIdx.x] = classes[col_start + threadIdx.x];
    }
  }
  __syncthreads();

  if (threadIdx.x < row_size) {
    const int64_t i = row_start + threadIdx.x;
    const RotatedBox<T> cur = boxes[i];
    const int64_t cur_class = classes != nullptr ? classes[i] : 0;
    uint64_t bits = 0;
    const int first = (row_block == col_block) ? threadIdx.x + 1 : 0;
    for (int j = first; j < col_size; ++j) {
      if (classes != nullptr && block_classes[j] != cur_class) continue;
      if (nms_rotated_detail::suppresses(cur, block_boxes[j], iou_threshold)) {
        bits |= 1ULL << j;
      }
    }
    mask[i * col_blocks + col_block] = bits;
  }
}

template <typename T>
int64_t geometry_offset_bytes(int64_t n) {
  return nms_mask::workspace_words(n) * static_cast<int64_t>(sizeof(uint64_t));
}

template <typename T>
int64_t workspace_bytes(int64_t n) {
  return geometry_offset_bytes<T>(n) +
         n * static_cast<int64_t>(sizeof(RotatedBox<T>));
}

template <typename T>
cudaError_t launch(const T* boxes_sorted, const int64_t* classes_sorted,
                   const int64_t* order, int64_t n, T iou_threshold,
                   bool clockwise, int64_t* kept, int64_t* num_kept,
                   void* workspace, cudaStream_t stream) {
  if (n == 0) return cudaErrorInvalidValue;  // the caller handles empty input
  const int64_t col_blocks = nms_mask::col_blocks(n);
  if (col_blocks > nms_mask::kMaxColBlocks) return cudaErrorInvalidValue;
  uint64_t* mask = static_cast<uint64_t*>(workspace);
  RotatedBox<T>* geometry = reinterpret_cast<RotatedBox<T>*>(
      static_cast<char*>(workspace) + geometry_offset_bytes<T>(n));
  geometry_kernel<T><<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0,
                       stream>>>(boxes_sorted, n, clockwise, geometry);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  // col_blocks <= 65535: at most 2147450880 tiles, within grid.x's 2^31 - 1.
  const int64_t tiles = col_blocks * (col_blocks + 1) / 2;
  nms_rotated_mask_kernel<T>
      <<<static_cast<unsigned int>(tiles), kBoxesPerBlock, 0, stream>>>(
          geometry, classes_sorted, n, iou_threshold, mask, col_blocks);
  err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  return nms_mask::launch_walk(mask, order, n, kept, num_kept, stream);
}

}  // namespace

bool nms_rotated_cuda_fits(int64_t n) {
  return nms_mask::col_blocks(n) <= nms_mask::kMaxColBlocks;
}

int64_t nms_rotated_cuda_workspace_bytes(RotatedDtype dtype, int64_t n) {
  return dtype == RotatedDtype::kDouble ? workspace_bytes<double>(n)
                                        : workspace_bytes<float>(n);
}

cudaError_t nms_rotated_cuda_launch(RotatedDtype dtype,
                                    const void* boxes_sorted,
                                    const int64_t* classes_sorted,
                                    const int64_t* order, int64_t n,
                                    double iou_threshold, bool clockwise,
                                    int64_t* kept, int64_t* num_kept,
                                    void* workspace, cudaStream_t stream) {
  switch (dtype) {
    case RotatedDtype::kFloat:
      return launch<float>(static_cast<const float*>(boxes_sorted),
                           classes_sorted, order, n,
                           static_cast<float>(iou_threshold), clockwise, kept,
                           num_kept, workspace, stream);
    case RotatedDtype::kDouble:
      return launch<double>(static_cast<const double*>(boxes_sorted),
                            classes_sorted, order, n, iou_threshold, clockwise,
                            kept, num_kept, workspace, stream);
    default:
      // The prepare step gives float or double boxes.
      return cudaErrorInvalidValue;
  }
}

}  // namespace visdet_ops
