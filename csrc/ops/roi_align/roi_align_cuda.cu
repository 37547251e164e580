#include "common/cuda_helpers.cuh"
#include "roi_align_kernel.h"
#include "roi_align_launch.h"

namespace visdet_ops {
namespace {

template <typename T>
__global__ void roi_align_forward_kernel(const T* __restrict__ input,
                                         const T* __restrict__ rois,
                                         RoIAlignShape s, T spatial_scale,
                                         T* __restrict__ output,
                                         T* __restrict__ argmax_y,
                                         T* __restrict__ argmax_x) {
  const int64_t n = s.output_numel();
  VISDET_GRID_STRIDE_LOOP(index, n) {
    roi_align_detail::roi_align_forward_element(
        index, input, rois, s.channels, s.height, s.width, s.pooled_h,
        s.pooled_w, spatial_scale, s.sampling_ratio, s.pool_mode, s.aligned,
        output, argmax_y, argmax_x);
  }
}

template <typename T>
__global__ void roi_align_backward_kernel(const T* __restrict__ grad_output,
                                          const T* __restrict__ rois,
                                          const T* argmax_y,
                                          const T* argmax_x, RoIAlignShape s,
                                          T spatial_scale, T* grad_input) {
  const int64_t n = s.output_numel();
  auto add = [grad_input](int64_t offset, T value) {
    atomicAdd(grad_input + offset, value);
  };
  VISDET_GRID_STRIDE_LOOP(index, n) {
    roi_align_detail::roi_align_backward_element(
        index, grad_output, rois, argmax_y, argmax_x, s.channels, s.height,
        s.width, s.pooled_h, s.pooled_w, spatial_scale, s.sampling_ratio,
        s.pool_mode, s.aligned, add);
  }
}

}  // namespace

template <typename T>
cudaError_t roi_align_forward_cuda_launch(const T* input, const T* rois,
                                          const RoIAlignShape& s,
                                          T spatial_scale, T* output,
                                          T* argmax_y, T* argmax_x,
                                          cudaStream_t stream) {
  const int64_t n = s.output_numel();
  if (n == 0) return cudaSuccess;
  roi_align_forward_kernel<T>
      <<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, stream>>>(
          input, rois, s, spatial_scale, output, argmax_y, argmax_x);
  return cudaGetLastError();
}

template <typename T>
cudaError_t roi_align_backward_cuda_launch(const T* grad_output,
                                           const T* rois, const T* argmax_y,
                                           const T* argmax_x,
                                           const RoIAlignShape& s,
                                           T spatial_scale, T* grad_input,
                                           cudaStream_t stream) {
  const int64_t n = s.output_numel();
  if (n == 0) return cudaSuccess;
  roi_align_backward_kernel<T>
      <<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, stream>>>(
          grad_output, rois, argmax_y, argmax_x, s, spatial_scale, grad_input);
  return cudaGetLastError();
}

#define VISDET_INSTANTIATE(T)                                                  \
  template cudaError_t roi_align_forward_cuda_launch<T>(                       \
      const T*, const T*, const RoIAlignShape&, T, T*, T*, T*, cudaStream_t);  \
  template cudaError_t roi_align_backward_cuda_launch<T>(                      \
      const T*, const T*, const T*, const T*, const RoIAlignShape&, T, T*,     \
      cudaStream_t);
VISDET_INSTANTIATE(float)
VISDET_INSTANTIATE(double)
#undef VISDET_INSTANTIATE

}  // namespace visdet_ops
