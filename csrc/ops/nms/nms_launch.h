// Torch-free entry points of the NMS kernels: pointers, sizes, stream.
#pragma once

#include <cstdint>

#if defined(VISDET_OPS_WITH_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace visdet_ops {

// boxes_sorted: [n, 4] xyxy, rows in descending score order.
// classes_sorted: [n] class of each row (batched_nms), or nullptr (one class).
// keep: [n] bytes, written 1 for kept rows, 0 otherwise.
template <typename T>
void nms_cpu(const T* boxes_sorted, const int64_t* classes_sorted, int64_t n,
             T iou_threshold, T offset, uint8_t* keep);

// nms_match (mmcv's rule, IoU >= threshold, no offset): leader[i] is the
// sorted position of the kept row whose group row i joins, i itself when row
// i is kept.
template <typename T>
void nms_match_cpu(const T* boxes_sorted, int64_t n, T iou_threshold,
                   int64_t* leader);

#if defined(VISDET_OPS_WITH_CUDA)
// Number of 64-bit mask words per row for n boxes.
int64_t nms_cuda_col_blocks(int64_t n);

// Bytes of scratch nms_cuda_launch / nms_match_cuda_launch need: the
// n x col_blocks suppression mask plus, for very large n, the global
// "removed" bitset.
int64_t nms_cuda_workspace_bytes(int64_t n);

// order: [n] the input index of each sorted row. Writes the kept input
// indices, in sorted order, to kept[0, *num_kept) and their count to
// *num_kept (device memory). classes_sorted as for nms_cpu. workspace: at
// least nms_cuda_workspace_bytes(n) bytes, 8-byte aligned, contents ignored.
template <typename T>
cudaError_t nms_cuda_launch(const T* boxes_sorted,
                            const int64_t* classes_sorted,
                            const int64_t* order, int64_t n, T iou_threshold,
                            T offset, int64_t* kept, int64_t* num_kept,
                            void* workspace, cudaStream_t stream);

// leader as for nms_match_cpu (device memory, [n]). kept_scratch: [n + 1]
// int64 device scratch.
template <typename T>
cudaError_t nms_match_cuda_launch(const T* boxes_sorted, int64_t n,
                                  T iou_threshold, int64_t* leader,
                                  int64_t* kept_scratch, void* workspace,
                                  cudaStream_t stream);
#endif

}  // namespace visdet_ops
