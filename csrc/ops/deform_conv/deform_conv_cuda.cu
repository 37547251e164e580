// deform_conv: CUDA kernels over deform_conv_kernel.h and their launchers
// (torch-free). 64-bit indexing throughout: a thread decomposes its index
// once and then loops over channels, so the divisions are amortised; the
// column buffer of a chunk passes 2^31 elements easily (e.g. 256 channels x
// 9 points x 16 images x 100 x 152 pixels).
#include <cstdlib>

#include "common/cuda_helpers.cuh"
#include "common/cuda_types.cuh"
#include "common/macros.h"
#include "deform_conv_kernel.h"
#include "deform_conv_launch.h"

namespace visdet_ops {
namespace {

// Enough threads to fill an H100 (132 SMs x 2048 threads) a few times over.
constexpr int64_t kTargetThreads = int64_t{1} << 19;

struct ToAcc {
  template <typename T>
  __device__ __forceinline__ cuda::acc_t<T> operator()(T v) const {
    return cuda::to_acc(v);
  }
};

template <typename T>
struct FromAcc {
  __device__ __forceinline__ T operator()(cuda::acc_t<T> v) const {
    return cuda::from_acc<T>(v);
  }
};

__device__ __forceinline__ void channel_range(int64_t slice, int64_t slices,
                                              int64_t channels,
                                              int64_t* begin, int64_t* end) {
  const int64_t per = (channels + slices - 1) / slices;
  *begin = slice * per;
  *end = min_of(channels, *begin + per);
}

template <typename T>
__global__ void deform_conv_im2col_kernel(const T* __restrict__ input,
                                          const T* __restrict__ offset,
                                          const T* __restrict__ mask,
                                          DeformConvShape s, int64_t slices,
                                          T* __restrict__ columns) {
  using A = cuda::acc_t<T>;
  const int64_t samples = s.samples();
  cuda::grid_stride_loop<int64_t>(samples * slices, [&](int64_t index) {
    const int64_t slice = index / samples;
    int64_t begin, end;
    channel_range(slice, slices, s.channels_per_group(), &begin, &end);
    deform_conv_detail::im2col_sample<A>(index - slice * samples, begin, end,
                                         input, offset, mask, s, columns,
                                         ToAcc(), FromAcc<T>());
  });
}

template <typename T, typename A, int kBatch>
__global__ void deform_conv_col2im_kernel(
    const T* __restrict__ input, const T* __restrict__ offset,
    const T* __restrict__ mask, T* __restrict__ columns,
    DeformConvShape s, int64_t slices, bool rotate, A* grad_input,
    A* __restrict__ grad_offset, A* __restrict__ grad_mask) {
  const int64_t samples = s.samples();
  const int64_t plane = s.out_plane();
  const int64_t offset_numel = 2 * samples;  // [B, 2 * DG * KK, OH * OW]
  auto add = [grad_input](int64_t i, A value) {
    atomicAdd(grad_input + i, value);
  };
  cuda::grid_stride_loop<int64_t>(samples * slices, [&](int64_t index) {
    const int64_t slice = index / samples;
    int64_t begin, end;
    channel_range(slice, slices, s.channels_per_group(), &begin, &end);
    const deform_conv_detail::Sample<A> p = deform_conv_detail::locate<A>(
        index - slice * samples, offset, mask, s, ToAcc());
    // Kernel point k starts k * count / KK channels in (see col2im_sample).
    const int64_t count = end - begin;
    const int64_t step = count >= s.kernel_points() ? count / s.kernel_points() : 1;
    const int64_t first = rotate && count > 0 ? (p.point * step) % count : 0;
    const deform_conv_detail::SampleGrad<A> g =
        deform_conv_detail::col2im_sample<kBatch>(p, begin, end, first, input,
                                                  columns, s, ToAcc(),
                                                  FromAcc<T>(), add);
    A* go = grad_offset + slice * offset_numel;
    go[p.offset_index] = g.y;
    go[p.offset_index + plane] = g.x;
    if (mask != nullptr) grad_mask[slice * samples + p.mask_index] = g.m;
  });
}


}  // namespace


static int64_t slices_for(const DeformConvShape& s, int64_t target) {
  const int64_t samples = s.samples();
  const int64_t channels = s.channels_per_group();
  if (samples <= 0 || channels <= 1) return 1;
  int64_t slices = (target + samples - 1) / samples;
  // At least 4 channels a thread: fewer would spend more on the sample
  // position than on the channels.
  const int64_t most = (channels + 3) / 4;
  if (slices > most) slices = most;
  return slices < 1 ? 1 : slices;
}

int64_t deform_conv_cuda_channel_slices(const DeformConvShape& s) {
  return slices_for(s, kTargetThreads);
}

template <typename T>
cudaError_t deform_conv_im2col_cuda_launch(const T* input, const T* offset,
                                           const T* mask,
                                           const DeformConvShape& s,
                                           T* columns, cudaStream_t stream) {
  const int64_t slices = slices_for(s, kTargetThreads);
  const int64_t n = s.samples() * slices;
  if (n == 0 || s.channels == 0) return cudaSuccess;
  deform_conv_im2col_kernel<T>
      <<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, stream>>>(
          input, offset, mask, s, slices, columns);
  return cudaGetLastError();
}

template <typename T, typename A>
cudaError_t deform_conv_col2im_cuda_launch(const T* input, const T* offset,
                                           const T* mask,
                                           T* columns,
                                           const DeformConvShape& s,
                                           int64_t slices, A* grad_input,
                                           A* grad_offset, A* grad_mask,
                                           cudaStream_t stream) {
  const int64_t n = s.samples() * slices;
  if (n == 0) return cudaSuccess;
  // TEMPORARY tuning knobs (removed once measured): channels batched per
  // load, channel rotation per kernel point.
  static const int batch = [] {
    const char* v = std::getenv("VISDET_OPS_DCN_BATCH");
    return v != nullptr ? std::atoi(v) : 4;
  }();
  static const bool rotate = [] {
    const char* v = std::getenv("VISDET_OPS_DCN_ROTATE");
    return v == nullptr || std::atoi(v) != 0;
  }();
  if (batch == 1) {
    deform_conv_col2im_kernel<T, A, 1>
        <<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, stream>>>(
            input, offset, mask, columns, s, slices, rotate, grad_input,
            grad_offset, grad_mask);
  } else if (batch == 8) {
    deform_conv_col2im_kernel<T, A, 8>
        <<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, stream>>>(
            input, offset, mask, columns, s, slices, rotate, grad_input,
            grad_offset, grad_mask);
  } else {
    deform_conv_col2im_kernel<T, A, 4>
        <<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, stream>>>(
            input, offset, mask, columns, s, slices, rotate, grad_input,
            grad_offset, grad_mask);
  }
  return cudaGetLastError();
}

#define VISDET_INSTANTIATE(T)                                                \
  template cudaError_t deform_conv_im2col_cuda_launch<T>(                    \
      const T*, const T*, const T*, const DeformConvShape&, T*,              \
      cudaStream_t);                                                         \
  template cudaError_t deform_conv_col2im_cuda_launch<T, cuda::acc_t<T>>(    \
      const T*, const T*, const T*, T*, const DeformConvShape&,              \
      int64_t, cuda::acc_t<T>*, cuda::acc_t<T>*, cuda::acc_t<T>*,            \
      cudaStream_t);
VISDET_INSTANTIATE(float)
VISDET_INSTANTIATE(double)
VISDET_INSTANTIATE(__half)
VISDET_INSTANTIATE(__nv_bfloat16)
#undef VISDET_INSTANTIATE


}  // namespace visdet_ops
