// Torch-free entry points of the RoIPool kernels: pointers, sizes, stream.
#pragma once

#include <cstdint>

#include "common/macros.h"
#include "common/scalar.h"

#if defined(VISDET_OPS_WITH_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace visdet_ops {

struct RoIPoolShape {
  int64_t batch_size, num_rois, channels, height, width, pooled_h, pooled_w;
  VISDET_HOST_DEVICE int64_t output_numel() const {
    return num_rois * channels * pooled_h * pooled_w;
  }
};

// The (RoI, channel) planes [begin, end) (plane k * C + c) of the [K, C, PH, PW]
// output and its argmax
// (offset h * width + w of the chosen input element in its plane, -1 if none).
// T: float, double, HostHalf, HostBFloat16 (read directly); rois and
// grad_input in acc_t<T>, as on CUDA.
template <typename T>
void roi_pool_forward_cpu(const T* input, const acc_t<T>* rois,
                          const RoIPoolShape& s, acc_t<T> spatial_scale,
                          int64_t begin, int64_t end, T* output,
                          int32_t* argmax);

// Channels [c_begin, c_end) of grad_input, which the caller has zeroed: an
// output element of channel c adds only to channel c of its RoI's image, so
// disjoint channel ranges may run in parallel (and each sums in a fixed order).
template <typename T>
void roi_pool_backward_cpu(const T* grad_output, const acc_t<T>* rois,
                           const int32_t* argmax, const RoIPoolShape& s,
                           int64_t c_begin, int64_t c_end,
                           acc_t<T>* grad_input);

#if defined(VISDET_OPS_WITH_CUDA)
// T: float, double, __half, __nv_bfloat16 (bin edges computed in acc_t<T>;
// rois in acc_t<T>, never rounded to 16 bits).
template <typename T>
cudaError_t roi_pool_forward_cuda_launch(const T* input, const acc_t<T>* rois,
                                         const RoIPoolShape& s,
                                         double spatial_scale, T* output,
                                         int32_t* argmax, cudaStream_t stream);

// grad_input (acc_t<T>: a float32 buffer for the 16-bit types, converted by
// the caller) must be zeroed by the caller; accumulates with atomicAdd.
template <typename T>
cudaError_t roi_pool_backward_cuda_launch(const T* grad_output, const acc_t<T>* rois,
                                          const int32_t* argmax,
                                          const RoIPoolShape& s,
                                          acc_t<T>* grad_input,
                                          cudaStream_t stream);
#endif

}  // namespace visdet_ops
