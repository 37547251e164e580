#include "common/cuda_helpers.cuh"
#include "roi_align_kernel.h"
#include "roi_align_launch.h"

namespace visdet_ops {
namespace {

template <typename T, typename I>
__global__ void roi_align_forward_kernel(const T* __restrict__ input,
                                         const acc_t<T>* __restrict__ rois,
                                         RoIAlignShape s,
                                         acc_t<T> spatial_scale,
                                         T* __restrict__ output,
                                         acc_t<T>* __restrict__ argmax_y,
                                         acc_t<T>* __restrict__ argmax_x) {
  cuda::grid_stride_loop<I>(static_cast<I>(s.output_numel()), [&](I index) {
    roi_align_detail::roi_align_forward_element<T, I>(
        index, input, rois, s.batch_size, static_cast<I>(s.channels),
        static_cast<I>(s.height), static_cast<I>(s.width),
        static_cast<I>(s.pooled_h), static_cast<I>(s.pooled_w), spatial_scale,
        s.sampling_ratio, s.pool_mode, s.aligned, output, argmax_y, argmax_x);
  });
}

// grad_input is in the compute type (a float32 buffer for 16-bit storage):
// float atomics are native on every supported arch, 16-bit ones are slow
// before sm_80 (bfloat16) and would round every partial sum to 8-11 bits.
template <typename T, typename I>
__global__ void roi_align_backward_kernel(const T* __restrict__ grad_output,
                                          const acc_t<T>* __restrict__ rois,
                                          const acc_t<T>* argmax_y,
                                          const acc_t<T>* argmax_x,
                                          RoIAlignShape s,
                                          acc_t<T> spatial_scale,
                                          acc_t<T>* grad_input) {
  auto add = [grad_input](I offset, acc_t<T> value) {
    atomicAdd(grad_input + offset, value);
  };
  cuda::grid_stride_loop<I>(static_cast<I>(s.output_numel()), [&](I index) {
    roi_align_detail::roi_align_backward_element<T, I>(
        index, grad_output, rois, argmax_y, argmax_x, s.batch_size,
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
  // The kernels skip a RoI whose batch index is outside [0, batch_size), so
  // one plane past the last is the largest offset ever formed.
  return s.output_numel() < limit && input_plane * (s.batch_size + 1) < limit;
}

}  // namespace

template <typename T>
cudaError_t roi_align_forward_cuda_launch(const T* input, const acc_t<T>* rois,
                                          const RoIAlignShape& s,
                                          double spatial_scale, T* output,
                                          acc_t<T>* argmax_y,
                                          acc_t<T>* argmax_x,
                                          cudaStream_t stream) {
  const int64_t n = s.output_numel();
  if (n == 0) return cudaSuccess;
  const auto scale = static_cast<acc_t<T>>(spatial_scale);
  if (fits_int32(s)) {
    roi_align_forward_kernel<T, int32_t>
        <<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, stream>>>(
            input, rois, s, scale, output, argmax_y, argmax_x);
  } else {
    roi_align_forward_kernel<T, int64_t>
        <<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, stream>>>(
            input, rois, s, scale, output, argmax_y, argmax_x);
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t roi_align_backward_cuda_launch(const T* grad_output,
                                           const acc_t<T>* rois,
                                           const acc_t<T>* argmax_y,
                                           const acc_t<T>* argmax_x,
                                           const RoIAlignShape& s,
                                           double spatial_scale,
                                           acc_t<T>* grad_input,
                                           cudaStream_t stream) {
  const int64_t n = s.output_numel();
  if (n == 0) return cudaSuccess;
  const auto scale = static_cast<acc_t<T>>(spatial_scale);
  if (fits_int32(s)) {
    roi_align_backward_kernel<T, int32_t>
        <<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, stream>>>(
            grad_output, rois, argmax_y, argmax_x, s, scale, grad_input);
  } else {
    roi_align_backward_kernel<T, int64_t>
        <<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, stream>>>(
            grad_output, rois, argmax_y, argmax_x, s, scale, grad_input);
  }
  return cudaGetLastError();
}

#define VISDET_INSTANTIATE(T)                                                \
  template cudaError_t roi_align_forward_cuda_launch<T>(                     \
      const T*, const acc_t<T>*, const RoIAlignShape&, double, T*, acc_t<T>*,       \
      acc_t<T>*, cudaStream_t);                                              \
  template cudaError_t roi_align_backward_cuda_launch<T>(                    \
      const T*, const acc_t<T>*, const acc_t<T>*, const acc_t<T>*,                  \
      const RoIAlignShape&, double, acc_t<T>*, cudaStream_t);
VISDET_INSTANTIATE(float)
VISDET_INSTANTIATE(double)
VISDET_INSTANTIATE(__half)
VISDET_INSTANTIATE(__nv_bfloat16)
#undef VISDET_INSTANTIATE

}  // namespace visdet_ops
