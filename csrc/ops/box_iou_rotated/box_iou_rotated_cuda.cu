// box_iou_rotated on CUDA. All pairs: one kernel computes every box's geometry
// once (the trigonometry, the circumscribed circle) into the workspace, then
// 32 x 32 tiles of pairs, each tile's 32 + 32 boxes staged in shared memory,
// a 32 x 8 thread block with 4 rows per thread and the threads of a warp
// along the columns (coalesced output rows). Aligned: a grid-stride loop over
// pairs, each box used once.
#include <cstdint>

#include "box_iou_rotated_kernel.h"
#include "box_iou_rotated_launch.h"
#include "common/cuda_helpers.cuh"
#include "common/scalar.h"

namespace visdet_ops {
namespace {

using rotated_detail::RotatedBox;

constexpr int kTile = 32;          // rows and columns of a tile
constexpr int kThreadsY = 8;       // thread rows per block (kTile / 4 rows each)
constexpr int64_t kMaxGrid = 65535;

template <typename T>
// Flags are int, not bool: PTX loads a bool parameter as s8 on x86_64 and u8 on aarch64 (tests/test_aarch64.py).
__global__ void geometry_kernel(const T* __restrict__ boxes, int64_t n,
                                int clockwise,
                                RotatedBox<acc_t<T>>* __restrict__ out) {
  cuda::grid_stride_loop<int64_t>(n, [&](int64_t i) {
    out[i] = rotated_detail::load_box(boxes + 5 * i, clockwise != 0);
  });
}

template <typename T>
__global__ void pairs_kernel(const RotatedBox<acc_t<T>>* __restrict__ rows_g,
                             const RotatedBox<acc_t<T>>* __restrict__ cols_g,
                             int64_t rows, int64_t cols, int mode,
                             T* __restrict__ out) {
  using A = acc_t<T>;
  __shared__ RotatedBox<A> row_boxes[kTile];
  __shared__ RotatedBox<A> col_boxes[kTile];
  const int tid = threadIdx.y * kTile + threadIdx.x;
  for (int64_t row0 = static_cast<int64_t>(blockIdx.y) * kTile; row0 < rows;
       row0 += static_cast<int64_t>(gridDim.y) * kTile) {
    for (int64_t col0 = static_cast<int64_t>(blockIdx.x) * kTile; col0 < cols;
         col0 += static_cast<int64_t>(gridDim.x) * kTile) {
      __syncthreads();  // the previous tile's reads are done
      if (tid < kTile) {
        if (col0 + tid < cols) col_boxes[tid] = cols_g[col0 + tid];
      } else if (tid < 2 * kTile) {
        if (row0 + tid - kTile < rows) {
          row_boxes[tid - kTile] = rows_g[row0 + tid - kTile];
        }
      }
      __syncthreads();
      const int64_t j = col0 + threadIdx.x;
      if (j >= cols) continue;
      for (int r = threadIdx.y; r < kTile; r += kThreadsY) {
        const int64_t i = row0 + r;
        if (i >= rows) break;
        out[i * cols + j] = from_acc<T>(box_iou_rotated_detail::pair_value(
            row_boxes[r], col_boxes[threadIdx.x], mode));
      }
    }
  }
}

template <typename T>
__global__ void aligned_kernel(const T* __restrict__ boxes1,
                               const T* __restrict__ boxes2, int64_t n,
                               int mode, int clockwise, T* __restrict__ out) {
  cuda::grid_stride_loop<int64_t>(n, [&](int64_t i) {
    out[i] = from_acc<T>(box_iou_rotated_detail::pair_value(
        rotated_detail::load_box(boxes1 + 5 * i, clockwise),
        rotated_detail::load_box(boxes2 + 5 * i, clockwise), mode));
  });
}

template <typename T>
int64_t workspace_bytes(const BoxIouRotatedShape& shape) {
  if (shape.aligned) return 0;
  return (shape.rows + shape.cols) *
         static_cast<int64_t>(sizeof(RotatedBox<acc_t<T>>));
}

template <typename T>
cudaError_t launch(const void* boxes1, const void* boxes2,
                   const BoxIouRotatedShape& shape, void* out, void* workspace,
                   cudaStream_t stream) {
  using A = acc_t<T>;
  const T* b1 = static_cast<const T*>(boxes1);
  const T* b2 = static_cast<const T*>(boxes2);
  T* o = static_cast<T*>(out);
  if (shape.rows == 0 || (!shape.aligned && shape.cols == 0)) {
    return cudaSuccess;
  }
  if (shape.aligned) {
    aligned_kernel<T><<<cuda::blocks_for(shape.rows), cuda::kThreadsPerBlock,
                        0, stream>>>(b1, b2, shape.rows, shape.mode,
                                     shape.clockwise, o);
    return cudaGetLastError();
  }
  RotatedBox<A>* g1 = static_cast<RotatedBox<A>*>(workspace);
  RotatedBox<A>* g2 = g1 + shape.rows;
  geometry_kernel<T><<<cuda::blocks_for(shape.rows), cuda::kThreadsPerBlock, 0,
                       stream>>>(b1, shape.rows, shape.clockwise, g1);
  geometry_kernel<T><<<cuda::blocks_for(shape.cols), cuda::kThreadsPerBlock, 0,
                       stream>>>(b2, shape.cols, shape.clockwise, g2);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  const int64_t grid_x = min_of<int64_t>((shape.cols + kTile - 1) / kTile, kMaxGrid);
  const int64_t grid_y = min_of<int64_t>((shape.rows + kTile - 1) / kTile, kMaxGrid);
  const dim3 grid(static_cast<unsigned int>(grid_x),
                  static_cast<unsigned int>(grid_y));
  const dim3 block(kTile, kThreadsY);
  pairs_kernel<T><<<grid, block, 0, stream>>>(g1, g2, shape.rows, shape.cols,
                                              shape.mode, o);
  return cudaGetLastError();
}

}  // namespace

int64_t box_iou_rotated_cuda_workspace_bytes(RotatedDtype dtype,
                                             const BoxIouRotatedShape& shape) {
  return dtype == RotatedDtype::kDouble ? workspace_bytes<double>(shape)
                                        : workspace_bytes<float>(shape);
}

cudaError_t box_iou_rotated_cuda_launch(RotatedDtype dtype, const void* boxes1,
                                        const void* boxes2,
                                        const BoxIouRotatedShape& shape,
                                        void* out, void* workspace,
                                        cudaStream_t stream) {
  switch (dtype) {
    case RotatedDtype::kFloat:
      return launch<float>(boxes1, boxes2, shape, out, workspace, stream);
    case RotatedDtype::kDouble:
      return launch<double>(boxes1, boxes2, shape, out, workspace, stream);
    case RotatedDtype::kHalf:
      return launch<__half>(boxes1, boxes2, shape, out, workspace, stream);
    case RotatedDtype::kBFloat16:
      return launch<__nv_bfloat16>(boxes1, boxes2, shape, out, workspace,
                                   stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace visdet_ops
