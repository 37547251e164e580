// Torch-free entry points of the RoIAlign kernels: pointers, sizes, stream.
#pragma once

#include <cstdint>

#include "common/macros.h"

#if defined(VISDET_OPS_WITH_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace visdet_ops {

struct RoIAlignShape {
  int64_t batch_size, num_rois, channels, height, width, pooled_h, pooled_w;
  int64_t sampling_ratio;
  int pool_mode;  // roi_align_detail::PoolMode
  bool aligned;
  VISDET_HOST_DEVICE int64_t output_numel() const {
    return num_rois * channels * pooled_h * pooled_w;
  }
};

// Output elements [begin, end) of the [K, C, PH, PW] output.
template <typename T>
void roi_align_forward_cpu(const T* input, const T* rois,
                           const RoIAlignShape& s, T spatial_scale,
                           int64_t begin, int64_t end, T* output, T* argmax_y,
                           T* argmax_x);

// grad_input must be zeroed by the caller; serial (no atomics on the CPU).
template <typename T>
void roi_align_backward_cpu(const T* grad_output, const T* rois,
                            const T* argmax_y, const T* argmax_x,
                            const RoIAlignShape& s, T spatial_scale,
                            T* grad_input);

#if defined(VISDET_OPS_WITH_CUDA)
template <typename T>
cudaError_t roi_align_forward_cuda_launch(const T* input, const T* rois,
                                          const RoIAlignShape& s,
                                          T spatial_scale, T* output,
                                          T* argmax_y, T* argmax_x,
                                          cudaStream_t stream);

// grad_input must be zeroed by the caller; accumulates with atomicAdd.
template <typename T>
cudaError_t roi_align_backward_cuda_launch(const T* grad_output,
                                           const T* rois, const T* argmax_y,
                                           const T* argmax_x,
                                           const RoIAlignShape& s,
                                           T spatial_scale, T* grad_input,
                                           cudaStream_t stream);
#endif

}  // namespace visdet_ops
