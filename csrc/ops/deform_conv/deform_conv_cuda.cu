// deform_conv: CUDA kernels over deform_conv_kernel.h and their launchers
// (torch-free). 64-bit indexing throughout: a thread decomposes its index
// once and then loops over channels, so the divisions are amortised; the
// column buffer of a chunk passes 2^31 elements easily (e.g. 256 channels x
// 9 points x 16 images x 100 x 152 pixels).
#include <cstdint>
#include <cstdlib>
#include <type_traits>

#include "common/cuda_helpers.cuh"
#include "common/scalar.h"
#include "common/macros.h"
#include "deform_conv_kernel.h"
#include "deform_conv_launch.h"

namespace visdet_ops {
namespace {

// Enough threads to fill an H100 (132 SMs x 2048 threads) a few times over.
constexpr int64_t kTargetThreads = int64_t{1} << 19;

struct ToAcc {
  template <typename T>
  __device__ __forceinline__ acc_t<T> operator()(T v) const {
    return to_acc(v);
  }
};

template <typename T>
struct FromAcc {
  __device__ __forceinline__ T operator()(acc_t<T> v) const {
    return from_acc<T>(v);
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
  using A = acc_t<T>;
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

// grad_input[i] += a (if use_a), grad_input[i + 1] += b (if use_b).
// The backward is bound by L2 operations (ncu, H100, 128 ch 64x64 batch 8:
// L2 84% busy, DRAM 9%), 4 of them atomics per (sample, channel). With
// kVector (float accumulation, sm_90, rows of a multiple of 4 floats, so
// every row starts 16-byte aligned) the two corners of a row go in one
// float4 atomicAdd whenever they share an aligned float4 (3 of 4 positions),
// the other two lanes adding 0; otherwise two scalar atomics.
template <bool kVector, typename A>
struct AddPair {
  A* grad_input;
  __device__ __forceinline__ void operator()(int64_t i, A a, A b, bool use_a,
                                             bool use_b) const {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if constexpr (kVector && std::is_same<A, float>::value) {
      const int r = static_cast<int>(i & 3);
      if (use_a && use_b && r != 3) {
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (r == 0) {
          v.x = a;
          v.y = b;
        } else if (r == 1) {
          v.y = a;
          v.z = b;
        } else {
          v.z = a;
          v.w = b;
        }
        atomicAdd(reinterpret_cast<float4*>(grad_input + (i - r)), v);
        return;
      }
    }
#endif
    if (use_a) atomicAdd(grad_input + i, a);
    if (use_b) atomicAdd(grad_input + i + 1, b);
  }
};

template <typename T, typename A, bool kVector>
__global__ void deform_conv_col2im_kernel(
    const T* __restrict__ input, const T* __restrict__ offset,
    const T* __restrict__ mask, T* __restrict__ columns,
    DeformConvShape s, int64_t slices, A* grad_input,
    A* __restrict__ grad_offset, A* __restrict__ grad_mask) {
  const int64_t samples = s.samples();
  const int64_t plane = s.out_plane();
  const int64_t offset_numel = 2 * samples;  // [B, 2 * DG * KK, OH * OW]
  const AddPair<kVector, A> add_pair{grad_input};
  cuda::grid_stride_loop<int64_t>(samples * slices, [&](int64_t index) {
    const int64_t slice = index / samples;
    int64_t begin, end;
    channel_range(slice, slices, s.channels_per_group(), &begin, &end);
    const deform_conv_detail::Sample<A> p = deform_conv_detail::locate<A>(
        index - slice * samples, offset, mask, s, ToAcc());
    const deform_conv_detail::SampleGrad<A> g =
        deform_conv_detail::col2im_sample<A>(p, begin, end, input, columns, s,
                                             ToAcc(), FromAcc<T>(), add_pair);
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
  // Vector atomics: float accumulation, rows of a multiple of 4 floats and
  // a 16-byte aligned buffer; the kernel checks the architecture (sm_90+),
  // older ones take the scalar path. (Measured on the H100, 128 ch 64x64
  // batch 8: col2im 1398 -> 1142 us. Reading the corner pairs with float4
  // loads as well was slower, 1196 us, and im2col 200 -> 275 us: dropped.)
  const bool vector = std::is_same<A, float>::value && s.width % 4 == 0 &&
                      reinterpret_cast<std::uintptr_t>(grad_input) % 16 == 0;
  if (vector) {
    deform_conv_col2im_kernel<T, A, true>
        <<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, stream>>>(
            input, offset, mask, columns, s, slices, grad_input, grad_offset,
            grad_mask);
  } else {
    deform_conv_col2im_kernel<T, A, false>
        <<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, stream>>>(
            input, offset, mask, columns, s, slices, grad_input, grad_offset,
            grad_mask);
  }
  return cudaGetLastError();
}

#define VISDET_INSTANTIATE(T)                                                \
  template cudaError_t deform_conv_im2col_cuda_launch<T>(                    \
      const T*, const T*, const T*, const DeformConvShape&, T*,              \
      cudaStream_t);                                                         \
  template cudaError_t deform_conv_col2im_cuda_launch<T, acc_t<T>>(    \
      const T*, const T*, const T*, T*, const DeformConvShape&,              \
      int64_t, acc_t<T>*, acc_t<T>*, acc_t<T>*,            \
      cudaStream_t);
VISDET_FOR_FLOATING_TYPES(VISDET_INSTANTIATE)
#undef VISDET_INSTANTIATE


}  // namespace visdet_ops
