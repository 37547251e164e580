// bbox_overlaps on CUDA. Not aligned: a 2-D grid, threads along the columns
// (coalesced output rows), each thread keeping its column's box in registers
// for kRowsPerThread rows. Aligned: a grid-stride loop over pairs.
#include <cstdint>

#include "bbox_overlaps_kernel.h"
#include "bbox_overlaps_launch.h"
#include "common/cuda_helpers.cuh"
#include "common/scalar.h"

namespace visdet_ops {
namespace {

constexpr int kRowsPerThread = 8;
constexpr int kMaxGridY = 65535;

template <typename T>
struct Compute {
  using type = acc_t<T>;
};

template <typename T, typename A>
__device__ __forceinline__ void load_box(const T* p, A* box) {
  for (int k = 0; k < 4; ++k) box[k] = to_acc(p[k]);
}
template <>
__device__ __forceinline__ void load_box<float, float>(const float* p,
                                                       float* box) {
  const float4 v = *reinterpret_cast<const float4*>(p);  // rows are 16 B
  box[0] = v.x;
  box[1] = v.y;
  box[2] = v.z;
  box[3] = v.w;
}

template <typename T>
__global__ void overlaps_kernel(const T* __restrict__ boxes1,
                                const T* __restrict__ boxes2,
                                BboxOverlapsShape shape,
                                typename Compute<T>::type offset,
                                typename Compute<T>::type eps,
                                T* __restrict__ out) {
  using A = typename Compute<T>::type;
  const int64_t total_rows = shape.batch * shape.rows;
  const int64_t col_stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t row0 = static_cast<int64_t>(blockIdx.y) * kRowsPerThread;
       row0 < total_rows;
       row0 += static_cast<int64_t>(gridDim.y) * kRowsPerThread) {
    for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
         j < shape.cols; j += col_stride) {
      int64_t batch = -1;
      A b[4];
      for (int r = 0; r < kRowsPerThread; ++r) {
        const int64_t row = row0 + r;
        if (row >= total_rows) break;
        const int64_t row_batch = row / shape.rows;
        if (row_batch != batch) {  // rows of one group may span two images
          batch = row_batch;
          load_box(boxes2 + 4 * (batch * shape.cols + j), b);
        }
        A a[4];
        load_box(boxes1 + 4 * row, a);
        out[row * shape.cols + j] = from_acc<T>(
            bbox_overlaps_detail::overlap(a, b, shape.mode, offset, eps));
      }
    }
  }
}

template <typename T>
__global__ void aligned_kernel(const T* __restrict__ boxes1,
                               const T* __restrict__ boxes2,
                               BboxOverlapsShape shape,
                               typename Compute<T>::type offset,
                               typename Compute<T>::type eps,
                               T* __restrict__ out) {
  using A = typename Compute<T>::type;
  cuda::grid_stride_loop<int64_t>(shape.batch * shape.rows, [&](int64_t i) {
    A a[4], b[4];
    load_box(boxes1 + 4 * i, a);
    load_box(boxes2 + 4 * i, b);
    out[i] = from_acc<T>(bbox_overlaps_detail::overlap(a, b, shape.mode, offset, eps));
  });
}

template <typename T>
cudaError_t launch(const void* boxes1, const void* boxes2,
                   const BboxOverlapsShape& shape, double offset, double eps,
                   void* out, cudaStream_t stream) {
  using A = typename Compute<T>::type;
  const T* b1 = static_cast<const T*>(boxes1);
  const T* b2 = static_cast<const T*>(boxes2);
  T* o = static_cast<T*>(out);
  const int64_t total_rows = shape.batch * shape.rows;
  if (total_rows == 0 || (!shape.aligned && shape.cols == 0)) return cudaSuccess;
  if (shape.aligned) {
    aligned_kernel<T><<<cuda::blocks_for(total_rows), cuda::kThreadsPerBlock,
                        0, stream>>>(b1, b2, shape, static_cast<A>(offset),
                                    static_cast<A>(eps), o);
  } else {
    const int threads = shape.cols >= 256 ? 256 : 64;
    const int64_t grid_x = min_of<int64_t>((shape.cols + threads - 1) / threads, 65535);
    const int64_t grid_y = min_of<int64_t>(
        (total_rows + kRowsPerThread - 1) / kRowsPerThread, kMaxGridY);
    const dim3 grid(static_cast<unsigned int>(grid_x),
                    static_cast<unsigned int>(grid_y));
    overlaps_kernel<T><<<grid, threads, 0, stream>>>(
        b1, b2, shape, static_cast<A>(offset), static_cast<A>(eps), o);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t bbox_overlaps_cuda_launch(BoxDtype dtype, const void* boxes1,
                                      const void* boxes2,
                                      const BboxOverlapsShape& shape,
                                      double offset, double eps, void* out,
                                      cudaStream_t stream) {
  switch (dtype) {
    case BoxDtype::kFloat:
      return launch<float>(boxes1, boxes2, shape, offset, eps, out, stream);
    case BoxDtype::kDouble:
      return launch<double>(boxes1, boxes2, shape, offset, eps, out, stream);
    case BoxDtype::kHalf:
      return launch<__half>(boxes1, boxes2, shape, offset, eps, out, stream);
    case BoxDtype::kBFloat16:
      return launch<__nv_bfloat16>(boxes1, boxes2, shape, offset, eps, out, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace visdet_ops
