// Torch-free entry points of soft-NMS: pointers, sizes, stream.
//
// The boxes of one class form a segment [offsets[s], offsets[s + 1]) (one
// segment without classes). Within a segment the algorithm is mmcv's: pick
// the highest remaining score (ties: lowest position), emit it with that
// score, decay every other remaining score by weight(IoU with the pick), drop
// those that fall below min_score; repeat until none remain. Input scores
// that are NaN are dropped at the start.
//
// Outputs, per segment s, in pick order: picked[offsets[s] + k] = position of
// the k-th pick, picked_scores[...] its score at pick time; counts[s] = the
// number of picks.
#pragma once

#include <cstdint>

#if defined(VISDET_OPS_WITH_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace visdet_ops {

template <typename T>
struct SoftNmsParams {
  T iou_threshold, sigma, min_score, offset;
  int method;
};

// boxes: [n, 4]; scores: [n]; offsets: [num_segments + 1] (host memory).
template <typename T>
void soft_nms_cpu(const T* boxes, const T* scores, const int64_t* offsets,
                  int64_t num_segments, SoftNmsParams<T> params,
                  int64_t* picked, T* picked_scores, int64_t* counts);

#if defined(VISDET_OPS_WITH_CUDA)
// Scratch bytes soft_nms_cuda_launch needs for num_segments segments of at
// most max_len boxes and n boxes in all, on `device`.
template <typename T>
int64_t soft_nms_cuda_workspace_bytes(int64_t n, int64_t num_segments,
                                      int64_t max_len, int device);

// As soft_nms_cpu, all pointers device memory (offsets too); one thread block
// per segment.
template <typename T>
cudaError_t soft_nms_cuda_launch(const T* boxes, const T* scores,
                                 const int64_t* offsets, int64_t num_segments,
                                 int64_t n, int64_t max_len,
                                 SoftNmsParams<T> params, int64_t* picked,
                                 T* picked_scores, int64_t* counts,
                                 void* workspace, int device,
                                 cudaStream_t stream);
#endif

}  // namespace visdet_ops
