// Torch-free entry points of the deformable RoI pooling kernels: pointers,
// sizes, stream. S is the storage type of input, offset, output and their
// gradients; T the compute type (see deform_roi_pool_kernel.h). RoIs are T.
#pragma once

#include <cstdint>

#include "common/macros.h"

#if defined(VISDET_OPS_WITH_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace visdet_ops {

struct DeformRoIPoolShape {
  int64_t batch_size, num_rois, channels, height, width, pooled_h, pooled_w;
  int64_t sampling_ratio;
  VISDET_HOST_DEVICE int64_t num_bins() const {
    return num_rois * pooled_h * pooled_w;
  }
  VISDET_HOST_DEVICE int64_t output_numel() const {
    return num_bins() * channels;
  }
};

// offset may be null everywhere (no deformation: RoIAlign-like pooling).

// (S, T) = (float, float), (double, double), (HostHalf, float),
// (HostBFloat16, float): storage S read directly, computed in T.

// Output elements [begin, end) of the [K, C, PH, PW] output.
template <typename S, typename T>
void deform_roi_pool_forward_cpu(const S* input, const T* rois,
                                 const S* offset, const DeformRoIPoolShape& s,
                                 T spatial_scale, T gamma, int64_t begin,
                                 int64_t end, S* output);

// Input gradient of channels [channel_begin, channel_end): every output
// element of channel c writes only to input channel c, so disjoint channel
// ranges run in parallel without races, in a fixed order (deterministic).
// grad_input must be zeroed by the caller.
template <typename S, typename T>
void deform_roi_pool_backward_input_cpu(const S* grad_output, const T* rois,
                                        const S* offset,
                                        const DeformRoIPoolShape& s,
                                        T spatial_scale, T gamma,
                                        int64_t channel_begin,
                                        int64_t channel_end, T* grad_input);

// Offset gradient of bins [begin, end) of the K x PH x PW bins; each bin
// writes its own two values of grad_offset [K, 2, PH, PW].
template <typename S, typename T>
void deform_roi_pool_backward_offset_cpu(const S* grad_output, const S* input,
                                         const T* rois, const S* offset,
                                         const DeformRoIPoolShape& s,
                                         T spatial_scale, T gamma,
                                         int64_t begin, int64_t end,
                                         S* grad_offset);

#if defined(VISDET_OPS_WITH_CUDA)
// Instantiated for (S, T) = (float, float), (double, double),
// (__half, float), (__nv_bfloat16, float).
template <typename S, typename T>
cudaError_t deform_roi_pool_forward_cuda_launch(const S* input, const T* rois,
                                                const S* offset,
                                                const DeformRoIPoolShape& s,
                                                T spatial_scale, T gamma,
                                                S* output,
                                                cudaStream_t stream);

// grad_input (in T, zeroed by the caller) accumulates with atomicAdd; the
// offset gradient (written only when offset is not null) is deterministic:
// a fixed group of lanes per bin and a fixed-order shuffle reduction.
template <typename S, typename T>
cudaError_t deform_roi_pool_backward_cuda_launch(
    const S* grad_output, const S* input, const T* rois, const S* offset,
    const DeformRoIPoolShape& s, T spatial_scale, T gamma, T* grad_input,
    S* grad_offset, cudaStream_t stream);
#endif

}  // namespace visdet_ops
