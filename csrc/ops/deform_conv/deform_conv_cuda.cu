// deform_conv: CUDA kernels over deform_conv_kernel.h and their launchers
// (torch-free). 64-bit indexing throughout: a thread decomposes its index
// once and then loops over channels, so the divisions are amortised; the
// column buffer of a chunk passes 2^31 elements easily (e.g. 256 channels x
// 9 points x 16 images x 100 x 152 pixels).
#include <cstdint>
#include <cstdlib>
#include <cstring>
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


// out[b][c][r] = in[b][r][c] for `in` of [batch, rows, cols]: 32 x 32 tiles
// through shared memory, so that both sides are read and written in rows.
// Grid: (ceil(cols / 32), ceil(rows / 32), batch), blocks of 32 x 8.
template <typename T>
__global__ void transpose_kernel(const T* __restrict__ in, T* __restrict__ out,
                                 int64_t rows, int64_t cols) {
  __shared__ T tile[32][33];
  const int64_t plane = rows * cols;
  const T* src = in + static_cast<int64_t>(blockIdx.z) * plane;
  T* dst = out + static_cast<int64_t>(blockIdx.z) * plane;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * 32;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * 32;
  for (int k = threadIdx.y; k < 32; k += 8) {
    const int64_t r = r0 + k, c = c0 + threadIdx.x;
    if (r < rows && c < cols) tile[k][threadIdx.x] = src[r * cols + c];
  }
  __syncthreads();
  for (int k = threadIdx.y; k < 32; k += 8) {
    const int64_t c = c0 + k, r = r0 + threadIdx.x;
    if (r < rows && c < cols) dst[c * rows + r] = tile[threadIdx.x][k];
  }
}

constexpr int64_t kMaxGridYZ = 65535;

template <typename T>
void launch_transpose(const T* in, T* out, int64_t batch, int64_t rows,
                      int64_t cols, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned int>((cols + 31) / 32),
                  static_cast<unsigned int>((rows + 31) / 32),
                  static_cast<unsigned int>(batch));
  transpose_kernel<T><<<grid, dim3(32, 8), 0, stream>>>(in, out, rows, cols);
}

// Four consecutive channels of a channels-last map as A values.
template <typename T>
__device__ __forceinline__ void load_channels4(const T* p, float v[4]) {
  if constexpr (std::is_same<T, float>::value) {
    const float4 q = __ldg(reinterpret_cast<const float4*>(p));
    v[0] = q.x;
    v[1] = q.y;
    v[2] = q.z;
    v[3] = q.w;
  } else {  // __half, __nv_bfloat16: 8 bytes
    const uint2 q = __ldg(reinterpret_cast<const uint2*>(p));
    T t[4];
    memcpy(t, &q, sizeof(q));
#pragma unroll
    for (int u = 0; u < 4; ++u) v[u] = to_acc(t[u]);
  }
}

__device__ __forceinline__ void add_channels4(float* p, const float a[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float4*>(p), make_float4(a[0], a[1], a[2], a[3]));
#else
#pragma unroll
  for (int u = 0; u < 4; ++u) atomicAdd(p + u, a[u]);
#endif
}

// What a thread of the channels-last kernels works on: sample `index` of
// [0, s.samples() * slices) is slice `slice` of the channel quads of its
// deform group, [q_begin, q_end); col is its first column element and i00
// the element of corner (y0, x0), first channel, in the channels-last input
// (0 when the sample is outside the map).
template <typename T>
struct QuadWork {
  deform_conv_detail::Sample<float> p;
  deform_conv_detail::Corners<float> c;
  int64_t slice, q_begin, q_end, i00;
  T* col;
};

template <typename T>
__device__ __forceinline__ QuadWork<T> quad_work(int64_t index,
                                                 const T* __restrict__ offset,
                                                 const T* __restrict__ mask,
                                                 const DeformConvShape& s,
                                                 int64_t slices, T* columns) {
  QuadWork<T> w;
  const int64_t samples = s.samples();
  w.slice = index / samples;
  channel_range(w.slice, slices, s.channels_per_group() / 4, &w.q_begin,
                &w.q_end);
  w.p = deform_conv_detail::locate<float>(index - w.slice * samples, offset,
                                          mask, s, ToAcc());
  w.c = deform_conv_detail::corners(w.p.y, w.p.x, s.height, s.width);
  const int64_t ch0 = w.p.group * s.channels_per_group() + w.q_begin * 4;
  w.col = columns + (ch0 * s.kernel_points() + w.p.point) * s.columns_width() +
          w.p.column;
  w.i00 = w.c.inside ? ((w.p.b * s.height + w.c.y0) * s.width + w.c.x0) *
                               s.channels +
                           ch0
                     : 0;
  return w;
}

// im2col over a channels-last copy of the chunk's input ([B, H, W, C]): four
// channels of one corner in one vector load, where the NCHW kernel makes one
// load per channel and corner. The same expression per channel as
// im2col_sample (deform_conv_kernel.h), so the same column values. A thread
// takes a slice of its deform group's channel quads.
template <typename T>
__global__ void deform_conv_im2col_nhwc_kernel(const T* __restrict__ input_nhwc,
                                               const T* __restrict__ offset,
                                               const T* __restrict__ mask,
                                               DeformConvShape s, int64_t slices,
                                               T* __restrict__ columns) {
  using A = float;
  const int64_t row_stride = s.kernel_points() * s.columns_width();
  const int64_t right = s.channels, down = s.width * s.channels;
  cuda::grid_stride_loop<int64_t>(s.samples() * slices, [&](int64_t index) {
    const QuadWork<T> w = quad_work(index, offset, mask, s, slices, columns);
    const deform_conv_detail::Sample<A>& p = w.p;
    const deform_conv_detail::Corners<A>& c = w.c;
    T* col = w.col;
    const A hy = A(1) - c.ly, hx = A(1) - c.lx;
    const A w00 = hy * hx * p.m, w01 = hy * c.lx * p.m;
    const A w10 = c.ly * hx * p.m, w11 = c.ly * c.lx * p.m;
    int64_t i00 = w.i00;
    for (int64_t q = w.q_begin; q < w.q_end; ++q) {
      A v00[4] = {0, 0, 0, 0}, v01[4] = {0, 0, 0, 0}, v10[4] = {0, 0, 0, 0},
        v11[4] = {0, 0, 0, 0};
      if (c.inside) {
        if (c.v00) load_channels4(input_nhwc + i00, v00);
        if (c.v01) load_channels4(input_nhwc + i00 + right, v01);
        if (c.v10) load_channels4(input_nhwc + i00 + down, v10);
        if (c.v11) load_channels4(input_nhwc + i00 + down + right, v11);
      }
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        A v = A(0);
        if (c.inside) {
          if (c.v00) v += w00 * v00[u];
          if (c.v01) v += w01 * v01[u];
          if (c.v10) v += w10 * v10[u];
          if (c.v11) v += w11 * v11[u];
        }
        col[u * row_stride] = from_acc<T>(v);
      }
      i00 += 4;
      col += 4 * row_stride;
    }
  });
}

// col2im over a channels-last copy of the chunk's input ([B, H, W, C]) into a
// channels-last float gradient: four channels of one corner are one 16-byte
// vector load and one float4 atomicAdd (sm_90), where the NCHW kernel above
// makes 4 loads and 2-4 atomics per channel, so the L2 operations that bound
// it fall by about 2.5x. Same math and the same order of the terms per
// channel as col2im_sample (deform_conv_kernel.h), so the same column values.
// A thread takes a slice of its deform group's channel quads.
template <typename T>
__global__ void deform_conv_col2im_nhwc_kernel(
    const T* __restrict__ input_nhwc, const T* __restrict__ offset,
    const T* __restrict__ mask, T* __restrict__ columns, DeformConvShape s,
    int64_t slices, float* __restrict__ grad_nhwc,
    float* __restrict__ grad_offset, float* __restrict__ grad_mask) {
  using A = float;
  const int64_t samples = s.samples();
  const int64_t plane = s.out_plane();
  const int64_t offset_numel = 2 * samples;
  const int64_t row_stride = s.kernel_points() * s.columns_width();
  const int64_t right = s.channels, down = s.width * s.channels;
  cuda::grid_stride_loop<int64_t>(samples * slices, [&](int64_t index) {
    const QuadWork<T> w = quad_work(index, offset, mask, s, slices, columns);
    const deform_conv_detail::Sample<A>& p = w.p;
    const deform_conv_detail::Corners<A>& c = w.c;
    T* col = w.col;
    A gy = A(0), gx = A(0), gmask = A(0);
    if (!c.inside) {  // the sample is 0: no gradient, and its columns are 0
      for (int64_t ch = w.q_begin * 4; ch < w.q_end * 4; ++ch) {
        *col = from_acc<T>(A(0));
        col += row_stride;
      }
    } else {
      const A hy = A(1) - c.ly, hx = A(1) - c.lx;
      const A w00 = hy * hx, w01 = hy * c.lx, w10 = c.ly * hx,
              w11 = c.ly * c.lx;
      const A m00 = w00 * p.m, m01 = w01 * p.m, m10 = w10 * p.m,
              m11 = w11 * p.m;
      // The other corners are one pixel (C) and one row (W * C) from i00.
      // Only valid corners are dereferenced.
      int64_t i00 = w.i00;
      for (int64_t q = w.q_begin; q < w.q_end; ++q) {
        A gc[4], v00[4] = {0, 0, 0, 0}, v01[4] = {0, 0, 0, 0},
                 v10[4] = {0, 0, 0, 0}, v11[4] = {0, 0, 0, 0};
#pragma unroll
        for (int u = 0; u < 4; ++u) gc[u] = to_acc(col[u * row_stride]);
        if (c.v00) load_channels4(input_nhwc + i00, v00);
        if (c.v01) load_channels4(input_nhwc + i00 + right, v01);
        if (c.v10) load_channels4(input_nhwc + i00 + down, v10);
        if (c.v11) load_channels4(input_nhwc + i00 + down + right, v11);
        A a00[4], a01[4], a10[4], a11[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          A v = A(0);
          if (c.v00) v += m00 * v00[u];
          if (c.v01) v += m01 * v01[u];
          if (c.v10) v += m10 * v10[u];
          if (c.v11) v += m11 * v11[u];
          col[u * row_stride] = from_acc<T>(v);
          gmask += gc[u] * (w00 * v00[u] + w01 * v01[u] + w10 * v10[u] +
                            w11 * v11[u]);
          const A gm = gc[u] * p.m;
          gy += gm * (hx * (v10[u] - v00[u]) + c.lx * (v11[u] - v01[u]));
          gx += gm * (hy * (v01[u] - v00[u]) + c.ly * (v11[u] - v10[u]));
          a00[u] = gm * w00;
          a01[u] = gm * w01;
          a10[u] = gm * w10;
          a11[u] = gm * w11;
        }
        if (c.v00) add_channels4(grad_nhwc + i00, a00);
        if (c.v01) add_channels4(grad_nhwc + i00 + right, a01);
        if (c.v10) add_channels4(grad_nhwc + i00 + down, a10);
        if (c.v11) add_channels4(grad_nhwc + i00 + down + right, a11);
        i00 += 4;
        col += 4 * row_stride;
      }
    }
    A* go = grad_offset + w.slice * offset_numel;
    go[p.offset_index] = gy;
    go[p.offset_index + plane] = gx;
    if (mask != nullptr) grad_mask[w.slice * samples + p.mask_index] = gmask;
  });
}

// out[i] (+)= bias[i / cols]: the forward's bias over [C_out, B * OH * OW],
// rounded once, as a separate add would.
template <typename T>
__global__ void add_bias_kernel(T* __restrict__ out, const T* __restrict__ bias,
                                int64_t numel, int64_t cols) {
  cuda::grid_stride_loop<int64_t>(numel, [&](int64_t i) {
    out[i] = from_acc<T>(to_acc(out[i]) + to_acc(bias[i / cols]));
  });
}

// out[i] = sum over s of parts[s * numel + i], in slice order (so the same
// bits on every run), in T.
template <typename T, typename A>
__global__ void sum_slices_kernel(const A* __restrict__ parts, int64_t slices,
                                  int64_t numel, T* __restrict__ out) {
  cuda::grid_stride_loop<int64_t>(numel, [&](int64_t i) {
    A sum = A(0);
    for (int64_t k = 0; k < slices; ++k) sum += parts[k * numel + i];
    out[i] = from_acc<T>(sum);
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

bool deform_conv_cuda_channels_last(const DeformConvShape& s, int device) {
  if (s.deform_groups <= 0 || s.channels_per_group() % 4 != 0) return false;
  // The transposes' grids (launch_transpose): both orders of [C, H * W].
  const int64_t hw = s.height * s.width;
  if (s.batch > kMaxGridYZ || (s.channels + 31) / 32 > kMaxGridYZ ||
      (hw + 31) / 32 > kMaxGridYZ) {
    return false;
  }
  int major = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor,
                             device) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return major >= 9;  // float4 atomicAdd
}

template <typename T>
cudaError_t deform_conv_im2col_nhwc_cuda_launch(const T* input,
                                                const T* offset, const T* mask,
                                                const DeformConvShape& s,
                                                T* input_nhwc, T* columns,
                                                cudaStream_t stream) {
  const int64_t slices = slices_for(s, kTargetThreads);
  const int64_t n = s.samples() * slices;
  if (n == 0 || s.channels == 0) return cudaSuccess;
  launch_transpose<T>(input, input_nhwc, s.batch, s.channels,
                      s.height * s.width, stream);
  deform_conv_im2col_nhwc_kernel<T>
      <<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, stream>>>(
          input_nhwc, offset, mask, s, slices, columns);
  return cudaGetLastError();
}

template <typename T>
cudaError_t deform_conv_col2im_nhwc_cuda_launch(
    const T* input, const T* offset, const T* mask, T* columns,
    const DeformConvShape& s, int64_t slices, T* input_nhwc, float* grad_nhwc,
    float* grad_input, float* grad_offset, float* grad_mask,
    cudaStream_t stream) {
  const int64_t hw = s.height * s.width;
  const int64_t numel = s.batch * s.channels * hw;
  if (numel == 0) return cudaSuccess;
  launch_transpose<T>(input, input_nhwc, s.batch, s.channels, hw, stream);
  cudaError_t err = cudaMemsetAsync(
      grad_nhwc, 0, static_cast<size_t>(numel) * sizeof(float), stream);
  if (err != cudaSuccess) return err;
  const int64_t n = s.samples() * slices;
  if (n > 0) {
    deform_conv_col2im_nhwc_kernel<T>
        <<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, stream>>>(
            input_nhwc, offset, mask, columns, s, slices, grad_nhwc,
            grad_offset, grad_mask);
  }
  launch_transpose<float>(grad_nhwc, grad_input, s.batch, hw, s.channels,
                          stream);
  return cudaGetLastError();
}

template <typename T>
cudaError_t deform_conv_add_bias_cuda_launch(T* out, const T* bias,
                                             int64_t rows, int64_t cols,
                                             cudaStream_t stream) {
  const int64_t numel = rows * cols;
  if (numel == 0) return cudaSuccess;
  add_bias_kernel<T>
      <<<cuda::blocks_for(numel), cuda::kThreadsPerBlock, 0, stream>>>(
          out, bias, numel, cols);
  return cudaGetLastError();
}

template <typename T, typename A>
cudaError_t deform_conv_sum_slices_cuda_launch(const A* parts, int64_t slices,
                                               int64_t numel, T* out,
                                               cudaStream_t stream) {
  if (numel == 0) return cudaSuccess;
  sum_slices_kernel<T, A>
      <<<cuda::blocks_for(numel), cuda::kThreadsPerBlock, 0, stream>>>(
          parts, slices, numel, out);
  return cudaGetLastError();
}

#define VISDET_INSTANTIATE_NHWC(T)                                          \
  template cudaError_t deform_conv_im2col_nhwc_cuda_launch<T>(             \
      const T*, const T*, const T*, const DeformConvShape&, T*, T*,         \
      cudaStream_t);                                                        \
  template cudaError_t deform_conv_col2im_nhwc_cuda_launch<T>(             \
      const T*, const T*, const T*, T*, const DeformConvShape&, int64_t,    \
      T*, float*, float*, float*, float*, cudaStream_t);
VISDET_INSTANTIATE_NHWC(float)
VISDET_INSTANTIATE_NHWC(__half)
VISDET_INSTANTIATE_NHWC(__nv_bfloat16)
#undef VISDET_INSTANTIATE_NHWC

#define VISDET_INSTANTIATE(T)                                                \
  template cudaError_t deform_conv_im2col_cuda_launch<T>(                    \
      const T*, const T*, const T*, const DeformConvShape&, T*,              \
      cudaStream_t);                                                         \
  template cudaError_t deform_conv_col2im_cuda_launch<T, acc_t<T>>(    \
      const T*, const T*, const T*, T*, const DeformConvShape&,              \
      int64_t, acc_t<T>*, acc_t<T>*, acc_t<T>*,            \
      cudaStream_t);                                                         \
  template cudaError_t deform_conv_add_bias_cuda_launch<T>(                  \
      T*, const T*, int64_t, int64_t, cudaStream_t);                         \
  template cudaError_t deform_conv_sum_slices_cuda_launch<T, acc_t<T>>(      \
      const acc_t<T>*, int64_t, int64_t, T*, cudaStream_t);
VISDET_FOR_FLOATING_TYPES(VISDET_INSTANTIATE)
#undef VISDET_INSTANTIATE


}  // namespace visdet_ops
