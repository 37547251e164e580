#include "common/cuda_helpers.cuh"
#include "roi_align_kernel.h"
#include "roi_align_launch.h"

namespace visdet_ops {
namespace {

template <typename T, typename I>
__global__ void roi_align_forward_kernel(const T* __restrict__ input,
                                         const T* __restrict__ rois,
                                         RoIAlignShape s, T spatial_scale,
                                         T* __restrict__ output,
                                         T* __restrict__ argmax_y,
                                         T* __restrict__ argmax_x) {
  cuda::grid_stride_loop<I>(static_cast<I>(s.output_numel()), [&](I index) {
    roi_align_detail::roi_align_forward_element<T, I>(
        index, input, rois, static_cast<I>(s.channels),
        static_cast<I>(s.height), static_cast<I>(s.width),
        static_cast<I>(s.pooled_h), static_cast<I>(s.pooled_w), spatial_scale,
        s.sampling_ratio, s.pool_mode, s.aligned, output, argmax_y, argmax_x);
  });
}

template <typename T, typename I>
__global__ void roi_align_backward_kernel(const T* __restrict__ grad_output,
                                          const T* __restrict__ rois,
                                          const T* argmax_y,
                                          const T* argmax_x, RoIAlignShape s,
                                          T spatial_scale, T* grad_input) {
  auto add = [grad_input](I offset, T value) {
    atomicAdd(grad_input + offset, value);
  };
  cuda::grid_stride_loop<I>(static_cast<I>(s.output_numel()), [&](I index) {
    roi_align_detail::roi_align_backward_element<T, I>(
        index, grad_output, rois, argmax_y, argmax_x,
        static_cast<I>(s.channels), static_cast<I>(s.height),
        static_cast<I>(s.width), static_cast<I>(s.pooled_h),
        static_cast<I>(s.pooled_w), spatial_scale, s.sampling_ratio,
        s.pool_mode, s.aligned, add);
  });
}

// 32-bit indexing when every output index and every input offset (plus one
// grid stride, so the loop variable cannot wrap) fits in int32.
bool fits_int32(const RoIAlignShape& s) {
  constexpr int64_t limit = cuda::kMaxInt32LoopSize;
  const int64_t input_plane = s.channels * s.height * s.width;
  // The batch index is validated against the batch size by the host layer;
  // one plane past the last is the largest offset ever formed.
  return s.output_numel() < limit && input_plane * (s.batch_size + 1) < limit;
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
  if (fits_int32(s)) {
    roi_align_forward_kernel<T, int32_t>
        <<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, stream>>>(
            input, rois, s, spatial_scale, output, argmax_y, argmax_x);
  } else {
    roi_align_forward_kernel<T, int64_t>
        <<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, stream>>>(
            input, rois, s, spatial_scale, output, argmax_y, argmax_x);
  }
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
  if (fits_int32(s)) {
    roi_align_backward_kernel<T, int32_t>
        <<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, stream>>>(
            grad_output, rois, argmax_y, argmax_x, s, spatial_scale,
            grad_input);
  } else {
    roi_align_backward_kernel<T, int64_t>
        <<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, stream>>>(
            grad_output, rois, argmax_y, argmax_x, s, spatial_scale,
            grad_input);
  }
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
