// Torch-free entry points of box_iou_rotated: pointers, sizes, stream.
//
// boxes1: [rows, 5], boxes2: [cols, 5] (x, y, w, h, angle), contiguous.
// Not aligned: out[rows, cols] = value(boxes1[i], boxes2[j]).
// Aligned (rows == cols): out[rows] = value(boxes1[i], boxes2[i]).
#pragma once

#include <cstdint>

#include "ops/_rotated/rotated_launch.h"

#if defined(VISDET_OPS_WITH_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace visdet_ops {

struct BoxIouRotatedShape {
  int64_t rows, cols;
  int mode;  // box_iou_rotated_detail::Mode
  bool aligned;
  bool clockwise;  // false: the angles are counter-clockwise (negated first)
};

// CPU: T float or double. Every box's geometry is computed once, then the
// pairs, both over parallel (the host's thread pool).
template <typename T>
void box_iou_rotated_cpu(const T* boxes1, const T* boxes2,
                         const BoxIouRotatedShape& shape,
                         const ParallelRange& parallel, T* out);

#if defined(VISDET_OPS_WITH_CUDA)
// Bytes of scratch box_iou_rotated_cuda_launch needs (the boxes' geometry;
// 0 when aligned).
int64_t box_iou_rotated_cuda_workspace_bytes(RotatedDtype dtype,
                                             const BoxIouRotatedShape& shape);

// boxes and out of storage type dtype (computed in float for float16 and
// bfloat16). workspace: box_iou_rotated_cuda_workspace_bytes bytes, 8-byte
// aligned, contents ignored.
cudaError_t box_iou_rotated_cuda_launch(RotatedDtype dtype, const void* boxes1,
                                        const void* boxes2,
                                        const BoxIouRotatedShape& shape,
                                        void* out, void* workspace,
                                        cudaStream_t stream);
#endif

}  // namespace visdet_ops
