#include "common/cuda_helpers.cuh"
#include "roi_pool_kernel.h"
#include "roi_pool_launch.h"

namespace visdet_ops {
namespace {

template <typename T, typename I>
__global__ void roi_pool_forward_kernel(const T* __restrict__ input,
                                        const acc_t<T>* __restrict__ rois,
                                        RoIPoolShape s, acc_t<T> spatial_scale,
                                        T* __restrict__ output,
                                        int32_t* __restrict__ argmax) {
  cuda::grid_stride_loop<I>(static_cast<I>(s.output_numel()), [&](I index) {
    roi_pool_detail::roi_pool_forward_element<T, I>(
        index, input, rois, s.batch_size, static_cast<I>(s.channels),
        static_cast<I>(s.height), static_cast<I>(s.width),
        static_cast<I>(s.pooled_h), static_cast<I>(s.pooled_w), spatial_scale,
        output, argmax);
  });
}

// grad_input is in the compute type (a float32 buffer for 16-bit storage):
// float atomics are native on every supported arch, 16-bit ones are slow
// before sm_80 (bfloat16) and would round every partial sum to 8-11 bits.
template <typename T, typename I>
__global__ void roi_pool_backward_kernel(const T* __restrict__ grad_output,
                                         const acc_t<T>* __restrict__ rois,
                                         const int32_t* __restrict__ argmax,
                                         RoIPoolShape s,
                                         acc_t<T>* grad_input) {
  auto add = [grad_input](I offset, acc_t<T> value) {
    atomicAdd(grad_input + offset, value);
  };
  cuda::grid_stride_loop<I>(static_cast<I>(s.output_numel()), [&](I index) {
    roi_pool_detail::roi_pool_backward_element<T, I>(
        index, grad_output, rois, argmax, s.batch_size,
        static_cast<I>(s.channels), static_cast<I>(s.height),
        static_cast<I>(s.width), static_cast<I>(s.pooled_h),
        static_cast<I>(s.pooled_w), add);
  });
}

// 32-bit indexing when every output index and every input offset (plus one
// grid stride, so the loop variable cannot wrap) fits in int32. The kernels
// skip a RoI whose batch index is outside [0, batch_size), so one plane past
// the last is the largest offset ever formed.
bool fits_int32(const RoIPoolShape& s) {
  constexpr int64_t limit = cuda::kMaxInt32LoopSize;
  const int64_t input_plane = s.channels * s.height * s.width;
  return s.output_numel() < limit && input_plane * (s.batch_size + 1) < limit;
}

}  // namespace

template <typename T>
cudaError_t roi_pool_forward_cuda_launch(const T* input, const acc_t<T>* rois,
                                         const RoIPoolShape& s,
                                         double spatial_scale, T* output,
                                         int32_t* argmax, cudaStream_t stream) {
  const int64_t n = s.output_numel();
  if (n == 0) return cudaSuccess;
  const auto scale = static_cast<acc_t<T>>(spatial_scale);
  if (fits_int32(s)) {
    roi_pool_forward_kernel<T, int32_t>
        <<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, stream>>>(
            input, rois, s, scale, output, argmax);
  } else {
    roi_pool_forward_kernel<T, int64_t>
        <<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, stream>>>(
            input, rois, s, scale, output, argmax);
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t roi_pool_backward_cuda_launch(const T* grad_output, const acc_t<T>* rois,
                                          const int32_t* argmax,
                                          const RoIPoolShape& s,
                                          acc_t<T>* grad_input,
                                          cudaStream_t stream) {
  const int64_t n = s.output_numel();
  if (n == 0) return cudaSuccess;
  if (fits_int32(s)) {
    roi_pool_backward_kernel<T, int32_t>
        <<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, stream>>>(
            grad_output, rois, argmax, s, grad_input);
  } else {
    roi_pool_backward_kernel<T, int64_t>
        <<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, stream>>>(
            grad_output, rois, argmax, s, grad_input);
  }
  return cudaGetLastError();
}

#define VISDET_INSTANTIATE(T)                                                 \
  template cudaError_t roi_pool_forward_cuda_launch<T>(                       \
      const T*, const acc_t<T>*, const RoIPoolShape&, double, T*, int32_t*,          \
      cudaStream_t);                                                          \
  template cudaError_t roi_pool_backward_cuda_launch<T>(                      \
      const T*, const acc_t<T>*, const int32_t*, const RoIPoolShape&, acc_t<T>*,     \
      cudaStream_t);
VISDET_INSTANTIATE(float)
VISDET_INSTANTIATE(double)
VISDET_INSTANTIATE(__half)
VISDET_INSTANTIATE(__nv_bfloat16)
#undef VISDET_INSTANTIATE

}  // namespace visdet_ops
