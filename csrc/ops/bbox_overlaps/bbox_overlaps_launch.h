// Torch-free entry points of bbox_overlaps: pointers, sizes, stream.
//
// boxes1: [batch, rows, 4], boxes2: [batch, cols, 4], contiguous.
// Not aligned: out[batch, rows, cols] = overlap(boxes1[b, i], boxes2[b, j]).
// Aligned (rows == cols): out[batch, rows] = overlap(boxes1[b, i], boxes2[b, i]).
#pragma once

#include <cstdint>

#if defined(VISDET_OPS_WITH_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace visdet_ops {

struct BboxOverlapsShape {
  int64_t batch, rows, cols;
  int mode;
  bool aligned;
};

// CPU: output rows [row_begin, row_end) of the flattened [batch * rows] rows.
template <typename T>
void bbox_overlaps_cpu(const T* boxes1, const T* boxes2,
                       const BboxOverlapsShape& shape, T offset, T eps,
                       int64_t row_begin, int64_t row_end, T* out);

#if defined(VISDET_OPS_WITH_CUDA)
// T: float, double, __half or __nv_bfloat16 (computed in float for the last
// two), passed as void pointers so that this header stays free of cuda_fp16.
enum class BoxDtype { kFloat, kDouble, kHalf, kBFloat16 };
cudaError_t bbox_overlaps_cuda_launch(BoxDtype dtype, const void* boxes1,
                                      const void* boxes2,
                                      const BboxOverlapsShape& shape,
                                      double offset, double eps, void* out,
                                      cudaStream_t stream);
#endif

}  // namespace visdet_ops
