// Torch-free entry points of the RoIAlignRotated kernels: pointers, sizes,
// stream.
#pragma once

#include <cstdint>

#include "common/macros.h"
#include "common/scalar.h"

#if defined(VISDET_OPS_WITH_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace visdet_ops {

struct RoIAlignRotatedShape {
  int64_t batch_size, num_rois, channels, height, width, pooled_h, pooled_w;
  int64_t sampling_ratio;
  bool aligned, clockwise;
  VISDET_HOST_DEVICE int64_t output_numel() const {
    return num_rois * channels * pooled_h * pooled_w;
  }
};

// Strides of grad_output [K, C, PH, PW] in elements: the CUDA backward reads
// it in place (the gradient of out.sum() is an expanded, stride-0 tensor).
struct RoIAlignRotatedGradStrides {
  int64_t k, c, h, w;
};

// The (RoI, channel) planes [begin, end) of the [K, C, PH, PW] output (plane
// k * C + c). T: float, double, HostHalf, HostBFloat16 (read directly,
// computed in float); rois [K, 6] in acc_t<T>, as on CUDA.
template <typename T>
void roi_align_rotated_forward_cpu(const T* input, const acc_t<T>* rois,
                                   const RoIAlignRotatedShape& s,
                                   acc_t<T> spatial_scale, int64_t begin,
                                   int64_t end, T* output);

// Channels [c_begin, c_end) of grad_input (acc_t<T>), which the caller has
// zeroed: an output element of channel c adds only to channel c of its RoI's
// image, so disjoint channel ranges may run in parallel (and each sums in a
// fixed order). grad_output is contiguous.
template <typename T>
void roi_align_rotated_backward_cpu(const T* grad_output, const acc_t<T>* rois,
                                    const RoIAlignRotatedShape& s,
                                    acc_t<T> spatial_scale, int64_t c_begin,
                                    int64_t c_end, acc_t<T>* grad_input);

#if defined(VISDET_OPS_WITH_CUDA)
// T: float, double, __half, __nv_bfloat16. rois [K, 6] are in acc_t<T>
// (float32 beside 16-bit input: never rounded to 16 bits).
template <typename T>
cudaError_t roi_align_rotated_forward_cuda_launch(
    const T* input, const acc_t<T>* rois, const RoIAlignRotatedShape& s,
    double spatial_scale, T* output, cudaStream_t stream);

// grad_input (acc_t<T>: a float32 buffer for the 16-bit types, converted by
// the caller) may be uninitialised: the launcher zeroes it on `stream`, then
// accumulates with atomicAdd. grad_output is read through `strides`.
template <typename T>
cudaError_t roi_align_rotated_backward_cuda_launch(
    const T* grad_output, const RoIAlignRotatedGradStrides& strides,
    const acc_t<T>* rois, const RoIAlignRotatedShape& s, double spatial_scale,
    acc_t<T>* grad_input, cudaStream_t stream);
#endif

}  // namespace visdet_ops
