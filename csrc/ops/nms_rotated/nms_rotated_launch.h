// Torch-free entry points of the rotated NMS kernels: pointers, sizes, stream.
#pragma once

#include <cstdint>

#include "ops/_rotated/rotated_launch.h"

#if defined(VISDET_OPS_WITH_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace visdet_ops {

// boxes_sorted: [n, 5] (x, y, w, h, angle), rows in descending score order.
// classes_sorted: [n] class of each row (labels), or nullptr (one class).
// clockwise: false when the angles are counter-clockwise (negated first).
// keep: [n] bytes, written 1 for kept rows, 0 otherwise. T: float or double.
// Each class is its own greedy pass, 64 rows at a time: the block's rows are
// resolved in order, then every later row of the class is tested against the
// block's kept rows over parallel (the host's thread pool).
template <typename T>
void nms_rotated_cpu(const T* boxes_sorted, const int64_t* classes_sorted,
                     int64_t n, T iou_threshold, bool clockwise,
                     const ParallelRange& parallel, uint8_t* keep);

#if defined(VISDET_OPS_WITH_CUDA)
// Whether n boxes fit the CUDA kernels' grid (at most 65535 * 64).
bool nms_rotated_cuda_fits(int64_t n);

// Bytes of scratch nms_rotated_cuda_launch needs: the boxes' geometry, the
// n x ceil(n / 64) suppression mask and, for very large n, the walk's bitset.
int64_t nms_rotated_cuda_workspace_bytes(RotatedDtype dtype, int64_t n);

// boxes_sorted of storage type dtype (float or double: the prepare step makes
// float16 / bfloat16 boxes float32), order: [n] the input index of each
// sorted row. Writes the kept input indices, in sorted order, to
// kept[0, *num_kept) and their count to *num_kept (device memory).
// workspace: nms_rotated_cuda_workspace_bytes bytes, 8-byte aligned,
// contents ignored.
cudaError_t nms_rotated_cuda_launch(RotatedDtype dtype,
                                    const void* boxes_sorted,
                                    const int64_t* classes_sorted,
                                    const int64_t* order, int64_t n,
                                    double iou_threshold, bool clockwise,
                                    int64_t* kept, int64_t* num_kept,
                                    void* workspace, cudaStream_t stream);
#endif

}  // namespace visdet_ops
