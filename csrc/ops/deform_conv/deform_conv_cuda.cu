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

template <typename T, typename A>
__global__ void deform_conv_col2im_kernel(
    const T* __restrict__ input, const T* __restrict__ offset,
    const T* __restrict__ mask, const T* __restrict__ grad_columns,
    DeformConvShape s, int64_t slices, A* grad_input,
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
    const deform_conv_detail::SampleGrad<A> g =
        deform_conv_detail::col2im_sample<A>(p, begin, end, input,
                                             grad_columns, s, ToAcc(), add);
    A* go = grad_offset + slice * offset_numel;
    go[p.offset_index] = g.y;
    go[p.offset_index + plane] = g.x;
    if (mask != nullptr) grad_mask[slice * samples + p.mask_index] = g.m;
  });
}

// Adds (a0, a1, a2, a3) to p[0..3] (p 16-byte aligned): one vector atomic on
// sm_90+, four scalar ones before.
__device__ __forceinline__ void atomic_add4(float* p, float a0, float a1,
                                            float a2, float a3) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float4*>(p), make_float4(a0, a1, a2, a3));
#else
  atomicAdd(p, a0);
  atomicAdd(p + 1, a1);
  atomicAdd(p + 2, a2);
  atomicAdd(p + 3, a3);
#endif
}

// col2im with grad_input accumulated channels-last ([B, H, W, C], float):
// a thread takes 4 channels a step, so each bilinear corner gets one 16-byte
// vector atomic (one L2 transaction) instead of four scalar atomics that
// land in four different sectors of the NCHW map. Requires
// channels_per_group % 4 == 0 (so every 4-channel step is 16-byte aligned).
// Same per-channel math and summation order as col2im_sample.
template <typename T>
__global__ void deform_conv_col2im_nhwc_kernel(
    const T* __restrict__ input, const T* __restrict__ offset,
    const T* __restrict__ mask, const T* __restrict__ grad_columns,
    DeformConvShape s, int64_t slices, float* grad_input,
    float* __restrict__ grad_offset, float* __restrict__ grad_mask) {
  using A = float;
  const int64_t samples = s.samples();
  const int64_t plane = s.out_plane();
  const int64_t offset_numel = 2 * samples;
  const int64_t cpg = s.channels_per_group();
  const int64_t per = ((cpg + slices - 1) / slices + 3) / 4 * 4;
  cuda::grid_stride_loop<int64_t>(samples * slices, [&](int64_t index) {
    const int64_t slice = index / samples;
    const int64_t c_begin = slice * per;
    const int64_t c_end = min_of(cpg, c_begin + per);
    const deform_conv_detail::Sample<A> p = deform_conv_detail::locate<A>(
        index - slice * samples, offset, mask, s, ToAcc());
    const deform_conv_detail::Corners<A> c =
        deform_conv_detail::corners(p.y, p.x, s.height, s.width);
    A gy = 0, gx = 0, gmask = 0;
    if (c.inside && c_begin < c_end) {
      const int64_t hw = s.height * s.width;
      const int64_t channel = p.group * cpg + c_begin;
      int64_t in_index =
          (p.b * s.channels + channel) * hw + c.y0 * s.width + c.x0;
      // Channels-last index of corner (y0, x0), channel `channel`; the
      // corners are +C, +W*C, +(W+1)*C (only formed when valid).
      int64_t gi_index =
          ((p.b * s.height + c.y0) * s.width + c.x0) * s.channels + channel;
      const int64_t dx = s.channels, dy = s.width * s.channels;
      const int64_t row_stride = s.kernel_points() * s.columns_width();
      const T* gcol = grad_columns +
                      (channel * s.kernel_points() + p.point) *
                          s.columns_width() +
                      p.column;
      const A hy = A(1) - c.ly, hx = A(1) - c.lx;
      const A w00 = hy * hx, w01 = hy * c.lx, w10 = c.ly * hx,
              w11 = c.ly * c.lx;
      for (int64_t ch = c_begin; ch < c_end; ch += 4) {
        A a00[4], a01[4], a10[4], a11[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int64_t ii = in_index + i * hw;
          const A gc = cuda::to_acc(gcol[i * row_stride]);
          const A v00 = c.v00 ? cuda::to_acc(input[ii]) : A(0);
          const A v01 = c.v01 ? cuda::to_acc(input[ii + 1]) : A(0);
          const A v10 = c.v10 ? cuda::to_acc(input[ii + s.width]) : A(0);
          const A v11 =
              c.v11 ? cuda::to_acc(input[ii + s.width + 1]) : A(0);
          gmask += gc * (w00 * v00 + w01 * v01 + w10 * v10 + w11 * v11);
          const A gm = gc * p.m;
          gy += gm * (hx * (v10 - v00) + c.lx * (v11 - v01));
          gx += gm * (hy * (v01 - v00) + c.ly * (v11 - v10));
          a00[i] = gm * w00;
          a01[i] = gm * w01;
          a10[i] = gm * w10;
          a11[i] = gm * w11;
        }
        if (c.v00) {
          atomic_add4(grad_input + gi_index, a00[0], a00[1], a00[2], a00[3]);
        }
        if (c.v01) {
          atomic_add4(grad_input + gi_index + dx, a01[0], a01[1], a01[2],
                      a01[3]);
        }
        if (c.v10) {
          atomic_add4(grad_input + gi_index + dy, a10[0], a10[1], a10[2],
                      a10[3]);
        }
        if (c.v11) {
          atomic_add4(grad_input + gi_index + dy + dx, a11[0], a11[1], a11[2],
                      a11[3]);
        }
        in_index += 4 * hw;
        gi_index += 4;
        gcol += 4 * row_stride;
      }
    }
    float* go = grad_offset + slice * offset_numel;
    go[p.offset_index] = gy;
    go[p.offset_index + plane] = gx;
    if (mask != nullptr) grad_mask[slice * samples + p.mask_index] = gmask;
  });
}

}  // namespace

// TEMPORARY tuning knob (removed after the device run).
static int64_t target_from_env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return kTargetThreads;
  return int64_t{1} << std::atoi(v);
}

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
  return slices_for(s, target_from_env("VISDET_DCN_TARGET"));
}

bool deform_conv_cuda_grad_input_channels_last(const DeformConvShape& s,
                                               bool float_accumulation) {
  if (!float_accumulation || s.channels_per_group() % 4 != 0) return false;
  // TEMPORARY knob (removed after the device run).
  const char* v = std::getenv("VISDET_DCN_NHWC");
  if (v != nullptr && v[0] == '0') return false;
  int device = 0, major = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor,
                             device) != cudaSuccess) {
    cudaGetLastError();  // clear; take the portable path
    return false;
  }
  return major >= 9;  // float4 atomics
}

template <typename T>
cudaError_t deform_conv_col2im_nhwc_cuda_launch(
    const T* input, const T* offset, const T* mask, const T* grad_columns,
    const DeformConvShape& s, int64_t slices, float* grad_input,
    float* grad_offset, float* grad_mask, cudaStream_t stream) {
  const int64_t n = s.samples() * slices;
  if (n == 0) return cudaSuccess;
  deform_conv_col2im_nhwc_kernel<T>
      <<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, stream>>>(
          input, offset, mask, grad_columns, s, slices, grad_input,
          grad_offset, grad_mask);
  return cudaGetLastError();
}

template <typename T>
cudaError_t deform_conv_im2col_cuda_launch(const T* input, const T* offset,
                                           const T* mask,
                                           const DeformConvShape& s,
                                           T* columns, cudaStream_t stream) {
  const int64_t slices = slices_for(s, target_from_env("VISDET_DCN_IM2COL_TARGET"));
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
                                           const T* grad_columns,
                                           const DeformConvShape& s,
                                           int64_t slices, A* grad_input,
                                           A* grad_offset, A* grad_mask,
                                           cudaStream_t stream) {
  const int64_t n = s.samples() * slices;
  if (n == 0) return cudaSuccess;
  deform_conv_col2im_kernel<T, A>
      <<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, stream>>>(
          input, offset, mask, grad_columns, s, slices, grad_input,
          grad_offset, grad_mask);
  return cudaGetLastError();
}

#define VISDET_INSTANTIATE(T)                                                \
  template cudaError_t deform_conv_im2col_cuda_launch<T>(                    \
      const T*, const T*, const T*, const DeformConvShape&, T*,              \
      cudaStream_t);                                                         \
  template cudaError_t deform_conv_col2im_cuda_launch<T, cuda::acc_t<T>>(    \
      const T*, const T*, const T*, const T*, const DeformConvShape&,        \
      int64_t, cuda::acc_t<T>*, cuda::acc_t<T>*, cuda::acc_t<T>*,            \
      cudaStream_t);
VISDET_INSTANTIATE(float)
VISDET_INSTANTIATE(double)
VISDET_INSTANTIATE(__half)
VISDET_INSTANTIATE(__nv_bfloat16)
#undef VISDET_INSTANTIATE

#define VISDET_INSTANTIATE_NHWC(T)                                           \
  template cudaError_t deform_conv_col2im_nhwc_cuda_launch<T>(               \
      const T*, const T*, const T*, const T*, const DeformConvShape&,        \
      int64_t, float*, float*, float*, cudaStream_t);
VISDET_INSTANTIATE_NHWC(float)
VISDET_INSTANTIATE_NHWC(__half)
VISDET_INSTANTIATE_NHWC(__nv_bfloat16)
#undef VISDET_INSTANTIATE_NHWC

}  // namespace visdet_ops
