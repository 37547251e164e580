#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/cuda_helpers.cuh"
#include "deform_roi_pool_launch.h"
#include "deform_roi_pool_kernel.h"

namespace visdet_ops {
namespace deform_roi_pool_detail {

// 16-bit storage, float arithmetic. Explicit intrinsics: torch builds .cu
// files with __CUDA_NO_HALF_CONVERSIONS__ / __CUDA_NO_BFLOAT16_CONVERSIONS__.
template <>
struct ValueCast<float, __half> {
  static __host__ __device__ __forceinline__ float load(__half v) {
    return __half2float(v);
  }
  static __host__ __device__ __forceinline__ __half store(float v) {
    return __float2half_rn(v);
  }
};

template <>
struct ValueCast<float, __nv_bfloat16> {
  static __host__ __device__ __forceinline__ float load(__nv_bfloat16 v) {
    return __bfloat162float(v);
  }
  static __host__ __device__ __forceinline__ __nv_bfloat16 store(float v) {
    return __float2bfloat16_rn(v);
  }
};

}  // namespace deform_roi_pool_detail

namespace {

namespace detail = deform_roi_pool_detail;

// Lanes that share one bin's channels in the offset-gradient kernel; a power
// of two dividing the warp size, so a bin's lanes sit in one warp and reduce
// with shuffles.
constexpr int kOffsetLanes = 8;
constexpr int kWarpSize = 32;
static_assert(cuda::kThreadsPerBlock % kWarpSize == 0,
              "the offset kernel needs whole warps per block");
static_assert(kWarpSize % kOffsetLanes == 0,
              "a bin's lanes must sit in one warp");

template <typename S, typename T, typename I>
__global__ void deform_roi_pool_forward_kernel(const S* __restrict__ input,
                                               const T* __restrict__ rois,
                                               const S* __restrict__ offset,
                                               DeformRoIPoolShape s,
                                               T spatial_scale, T gamma,
                                               S* __restrict__ output) {
  const detail::Dims<I> d = detail::dims_of<I>(s);
  cuda::grid_stride_loop<I>(static_cast<I>(s.output_numel()), [&](I index) {
    detail::forward_element<S, T, I>(index, input, rois, offset, d,
                                     spatial_scale, s.sampling_ratio, gamma,
                                     output);
  });
}

template <typename S, typename T, typename I>
__global__ void deform_roi_pool_backward_input_kernel(
    const S* __restrict__ grad_output, const T* __restrict__ rois,
    const S* __restrict__ offset, DeformRoIPoolShape s, T spatial_scale,
    T gamma, T* grad_input) {
  const detail::Dims<I> d = detail::dims_of<I>(s);
  auto add = [grad_input](I at, T value) { atomicAdd(grad_input + at, value); };
  cuda::grid_stride_loop<I>(static_cast<I>(s.output_numel()), [&](I index) {
    detail::backward_input_element<S, T, I>(index, grad_output, rois, offset,
                                            d, spatial_scale,
                                            s.sampling_ratio, gamma, add);
  });
}

// kOffsetLanes lanes per bin, lane j summing channels j, j + kOffsetLanes, ...;
// the partial sums meet in a fixed shuffle tree, so the result does not
// depend on scheduling (no atomics). The loop runs over whole warps so every
// lane reaches the shuffles; lanes past the last bin add nothing.
template <typename S, typename T, typename I>
__global__ void deform_roi_pool_backward_offset_kernel(
    const S* __restrict__ grad_output, const S* __restrict__ input,
    const T* __restrict__ rois, const S* __restrict__ offset,
    DeformRoIPoolShape s, T spatial_scale, T gamma,
    S* __restrict__ grad_offset) {
  const detail::Dims<I> d = detail::dims_of<I>(s);
  const I num_bins = static_cast<I>(s.num_bins());
  const I bins = d.pooled_h * d.pooled_w;
  const I warp_lane = static_cast<I>(threadIdx.x % kWarpSize);
  const I lane = warp_lane % kOffsetLanes;
  const I thread = static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) +
                   static_cast<I>(threadIdx.x);
  const I bins_per_pass =
      static_cast<I>(blockDim.x) * static_cast<I>(gridDim.x) / kOffsetLanes;
  for (I warp_bin = (thread - warp_lane) / kOffsetLanes; warp_bin < num_bins;
       warp_bin += bins_per_pass) {
    const I bin = warp_bin + warp_lane / kOffsetLanes;
    const bool active = bin < num_bins;
    detail::OffsetGrad<T> g{T(0), T(0), T(0), T(0)};
    if (active) {
      g = detail::backward_offset_partial<S, T, I>(
          bin, lane, static_cast<I>(kOffsetLanes), grad_output, input, rois,
          offset, d, spatial_scale, s.sampling_ratio, gamma);
    }
    for (int delta = kOffsetLanes / 2; delta > 0; delta /= 2) {
      g.dx += __shfl_down_sync(0xffffffffu, g.dx, delta, kOffsetLanes);
      g.dy += __shfl_down_sync(0xffffffffu, g.dy, delta, kOffsetLanes);
    }
    if (active && lane == 0) {
      const I k = bin / bins;
      const I within = bin % bins;
      grad_offset[k * 2 * bins + within] =
          detail::ValueCast<T, S>::store(g.dx * g.scale_x);
      grad_offset[k * 2 * bins + bins + within] =
          detail::ValueCast<T, S>::store(g.dy * g.scale_y);
    }
  }
}

// 32-bit indexing when every index the kernels form (plus one grid stride,
// so loop variables cannot wrap) fits in int32.
bool fits_int32(const DeformRoIPoolShape& s) {
  constexpr int64_t limit = cuda::kMaxInt32LoopSize;
  const int64_t input_plane = s.channels * s.height * s.width;
  // Batch indices are validated by the host layer; one plane past the last
  // is the largest input offset ever formed.
  return s.output_numel() < limit && input_plane * (s.batch_size + 1) < limit &&
         s.num_rois * 5 < limit && s.num_bins() * 2 < limit &&
         s.num_bins() * kOffsetLanes < limit;
}

}  // namespace

template <typename S, typename T>
cudaError_t deform_roi_pool_forward_cuda_launch(const S* input, const T* rois,
                                                const S* offset,
                                                const DeformRoIPoolShape& s,
                                                T spatial_scale, T gamma,
                                                S* output,
                                                cudaStream_t stream) {
  const int64_t n = s.output_numel();
  if (n == 0) return cudaSuccess;
  if (fits_int32(s)) {
    deform_roi_pool_forward_kernel<S, T, int32_t>
        <<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, stream>>>(
            input, rois, offset, s, spatial_scale, gamma, output);
  } else {
    deform_roi_pool_forward_kernel<S, T, int64_t>
        <<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, stream>>>(
            input, rois, offset, s, spatial_scale, gamma, output);
  }
  return cudaGetLastError();
}

template <typename S, typename T>
cudaError_t deform_roi_pool_backward_cuda_launch(
    const S* grad_output, const S* input, const T* rois, const S* offset,
    const DeformRoIPoolShape& s, T spatial_scale, T gamma, T* grad_input,
    S* grad_offset, cudaStream_t stream) {
  const int64_t n = s.output_numel();
  if (n == 0) return cudaSuccess;
  const bool small = fits_int32(s);
  if (small) {
    deform_roi_pool_backward_input_kernel<S, T, int32_t>
        <<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, stream>>>(
            grad_output, rois, offset, s, spatial_scale, gamma, grad_input);
  } else {
    deform_roi_pool_backward_input_kernel<S, T, int64_t>
        <<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, stream>>>(
            grad_output, rois, offset, s, spatial_scale, gamma, grad_input);
  }
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess || offset == nullptr) return err;
  // kThreadsPerBlock is a multiple of the warp size: whole warps per block.
  const int64_t threads = s.num_bins() * kOffsetLanes;
  if (small) {
    deform_roi_pool_backward_offset_kernel<S, T, int32_t>
        <<<cuda::blocks_for(threads), cuda::kThreadsPerBlock, 0, stream>>>(
            grad_output, input, rois, offset, s, spatial_scale, gamma,
            grad_offset);
  } else {
    deform_roi_pool_backward_offset_kernel<S, T, int64_t>
        <<<cuda::blocks_for(threads), cuda::kThreadsPerBlock, 0, stream>>>(
            grad_output, input, rois, offset, s, spatial_scale, gamma,
            grad_offset);
  }
  return cudaGetLastError();
}

#define VISDET_INSTANTIATE(S, T)                                              \
  template cudaError_t deform_roi_pool_forward_cuda_launch<S, T>(             \
      const S*, const T*, const S*, const DeformRoIPoolShape&, T, T, S*,      \
      cudaStream_t);                                                          \
  template cudaError_t deform_roi_pool_backward_cuda_launch<S, T>(            \
      const S*, const S*, const T*, const S*, const DeformRoIPoolShape&, T, T, \
      T*, S*, cudaStream_t);
VISDET_INSTANTIATE(float, float)
VISDET_INSTANTIATE(double, double)
VISDET_INSTANTIATE(__half, float)
VISDET_INSTANTIATE(__nv_bfloat16, float)
#undef VISDET_INSTANTIATE

}  // namespace visdet_ops
