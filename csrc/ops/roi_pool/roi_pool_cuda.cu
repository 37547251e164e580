#include "common/cuda_helpers.cuh"
#include "roi_pool_kernel.h"
#include "roi_pool_launch.h"

namespace visdet_ops {
namespace {

// channel_major: the elements walked channel-major (channel_major_element,
// ops/_rois/rois_kernel.h), for a map larger than about half the L2;
// row-major otherwise. Measured on an H200 (docs/benchmarks.md): channel-major
// takes the backward from 256 to 165 us on a 124 MB map, where the atomics of
// row-major miss L2; on an 8 MB map, which L2 holds either way, it makes the
// bins of overlapping RoIs that pick the same maximum add to it at the same
// time, and both kernels were 7-16% slower. It is an int parameter, not a bool:
// a kernel's bool parameter is loaded by the host ABI's sign of char
// (ld.param.s8 on x86_64, .u8 on aarch64), so the cubins of the two
// platforms' wheels would differ (docs/aarch64.md, "The same kernels").
template <typename T, typename I>
__global__ void roi_pool_forward_kernel(const T* __restrict__ input,
                                        const acc_t<T>* __restrict__ rois,
                                        RoIPoolShape s, acc_t<T> spatial_scale,
                                        T* __restrict__ output,
                                        int32_t* __restrict__ argmax,
                                        int channel_major) {
  const I channels = static_cast<I>(s.channels);
  const I pooled_h = static_cast<I>(s.pooled_h);
  const I pooled_w = static_cast<I>(s.pooled_w);
  const I num_rois = static_cast<I>(s.num_rois);
  cuda::grid_stride_loop<I>(static_cast<I>(s.output_numel()), [&](I j) {
    const PooledElement<I> e = pooled_element<I>(j, channel_major, num_rois,
                                                 channels, pooled_h, pooled_w);
    roi_pool_detail::roi_pool_forward_at<T, I>(
        e.index, e.k, e.c, e.ph, e.pw, input, rois, s.batch_size, channels,
        static_cast<I>(s.height), static_cast<I>(s.width), pooled_h, pooled_w,
        spatial_scale, output, argmax);
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
                                         acc_t<T>* grad_input,
                                         int channel_major) {
  auto add = [grad_input](I offset, acc_t<T> value) {
    atomicAdd(grad_input + offset, value);
  };
  const I channels = static_cast<I>(s.channels);
  const I pooled_h = static_cast<I>(s.pooled_h);
  const I pooled_w = static_cast<I>(s.pooled_w);
  const I num_rois = static_cast<I>(s.num_rois);
  cuda::grid_stride_loop<I>(static_cast<I>(s.output_numel()), [&](I j) {
    const PooledElement<I> e = pooled_element<I>(j, channel_major, num_rois,
                                                 channels, pooled_h, pooled_w);
    roi_pool_detail::roi_pool_backward_at<T, I>(
        e.index, e.k, e.c, grad_output, rois, argmax, s.batch_size, channels,
        static_cast<I>(s.height), static_cast<I>(s.width), add);
  });
}

// Channel-major for a map (input or grad_input) larger than half the L2.
bool walk_channel_major(const RoIPoolShape& s, int64_t element_bytes) {
  const int64_t map_bytes =
      s.batch_size * s.channels * s.height * s.width * element_bytes;
  return map_bytes > cuda::l2_cache_bytes() / 2;
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
  const bool channel_major = walk_channel_major(s, sizeof(T));
  if (fits_int32(s)) {
    roi_pool_forward_kernel<T, int32_t>
        <<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, stream>>>(
            input, rois, s, scale, output, argmax, channel_major);
  } else {
    roi_pool_forward_kernel<T, int64_t>
        <<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, stream>>>(
            input, rois, s, scale, output, argmax, channel_major);
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
  const bool channel_major = walk_channel_major(s, sizeof(acc_t<T>));
  if (fits_int32(s)) {
    roi_pool_backward_kernel<T, int32_t>
        <<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, stream>>>(
            grad_output, rois, argmax, s, grad_input, channel_major);
  } else {
    roi_pool_backward_kernel<T, int64_t>
        <<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, stream>>>(
            grad_output, rois, argmax, s, grad_input, channel_major);
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
VISDET_FOR_FLOATING_TYPES(VISDET_INSTANTIATE)
#undef VISDET_INSTANTIATE

}  // namespace visdet_ops
