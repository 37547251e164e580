#include <cstdint>
#include <type_traits>

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
  // Channel-major (channel_major_element, ops/_rois/rois_kernel.h): the RoIs
  // in flight share their channels' planes in L2.
  const I channels = static_cast<I>(s.channels);
  const I pooled_h = static_cast<I>(s.pooled_h);
  const I pooled_w = static_cast<I>(s.pooled_w);
  const I num_rois = static_cast<I>(s.num_rois);
  cuda::grid_stride_loop<I>(static_cast<I>(s.output_numel()), [&](I j) {
    const PooledElement<I> e = channel_major_element<I>(
        j, num_rois, channels, pooled_h, pooled_w);
    roi_align_detail::roi_align_forward_at<T, I>(
        e.index, e.k, e.c, e.ph, e.pw, input, rois, s.batch_size, channels,
        static_cast<I>(s.height), static_cast<I>(s.width), pooled_h, pooled_w,
        spatial_scale, s.sampling_ratio, s.pool_mode, s.aligned, output,
        argmax_y, argmax_x);
  });
}

// The backward, one block per (RoI, group of kGroupChannels channels). Average
// mode takes the separable product below when its matrices fit in shared
// memory; max mode, and what does not fit, scatter as follows.
// Each output bin scatters its gradient into the 4 pixels around each of its
// samples; nearby samples share pixels, so a direct atomicAdd per sample and
// corner makes many contended global atomics (three quarters of the time at
// FPN sizes). Instead the block accumulates into a shared-memory tile of the
// RoI's footprint (the pixels its samples can touch, axis_footprint) and then
// adds each touched pixel to global memory once. A footprint larger than the
// tile, or a sample outside it (only through rounding), falls back to a
// direct global atomicAdd. grad_output is read through its strides: the
// expanded gradient of out.sum() is not copied.
//
// grad_input is in the compute type (a float32 buffer for 16-bit storage):
// float atomics are native on every supported arch, 16-bit ones are slow
// before sm_80 (bfloat16) and would round every partial sum to 8-11 bits.
constexpr int kGroupChannels = 16;

// Adds v to the four floats at p (16-byte aligned): one vector reduction on
// sm_90 (red.global.add.v4.f32, PTX ISA 8.1), four atomics before it.
__device__ __forceinline__ void atomic_add4(float* p, float4 v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(p),
               "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w)
               : "memory");
#else
  atomicAdd(p, v.x);
  atomicAdd(p + 1, v.y);
  atomicAdd(p + 2, v.z);
  atomicAdd(p + 3, v.w);
#endif
}

constexpr int kTileBytes = 24 * 1024;

// vec4 is an int, not a bool: see roi_pool_cuda.cu's channel_major (a bool
// kernel parameter gives x86_64 and aarch64 builds different cubins).
template <typename T, typename I>
__global__ void __launch_bounds__(cuda::kThreadsPerBlock)
    roi_align_backward_kernel(const T* __restrict__ grad_output,
                              RoIAlignGradStrides gs,
                              const acc_t<T>* __restrict__ rois,
                              const acc_t<T>* argmax_y,
                              const acc_t<T>* argmax_x, RoIAlignShape s,
                              acc_t<T> spatial_scale, int vec4,
                              acc_t<T>* grad_input) {
  using A = acc_t<T>;
  using roi_align_detail::RoIGeometry;
  __shared__ __align__(16) unsigned char tile_bytes[kTileBytes];
  A* tile = reinterpret_cast<A*>(tile_bytes);
  constexpr int kCapacity = kTileBytes / static_cast<int>(sizeof(A));

  const I height = static_cast<I>(s.height), width = static_cast<I>(s.width);
  const I pooled_h = static_cast<I>(s.pooled_h);
  const I pooled_w = static_cast<I>(s.pooled_w);
  const I bins = pooled_h * pooled_w;
  const int64_t groups = (s.channels + kGroupChannels - 1) / kGroupChannels;
  const int64_t work = s.num_rois * groups;
  const bool is_max = s.pool_mode == roi_align_detail::kMax;

  // Channel-group-major: the blocks in flight add into a few channel groups'
  // planes of grad_input, which stay in L2 while every RoI adds to them.
  for (int64_t w = blockIdx.x; w < work; w += gridDim.x) {
    const int64_t k = w % s.num_rois;
    const int64_t c0 = (w / s.num_rois) * kGroupChannels;
    const int nc = static_cast<int>(min_of<int64_t>(kGroupChannels,
                                                    s.channels - c0));
    const A* roi = rois + k * 5;
    // Uniform over the block: every thread skips the same RoI.
    if (roi_flags(roi, s.batch_size) != 0) continue;
    const RoIGeometry<A> g = roi_align_detail::roi_geometry(
        roi, spatial_scale, s.pooled_h, s.pooled_w, s.sampling_ratio,
        s.aligned, s.height, s.width);
    const I batch = static_cast<I>(g.batch);
    const I items = static_cast<I>(nc) * bins;

    // The gradient of bin (cl, ph, pw) and where it adds: grad_output through
    // its strides; argmax in the forward's contiguous [K, C, PH, PW] layout.
    auto bin = [&](I item, auto add_to_plane) {
      const I pw = item % pooled_w;
      const I ph = (item / pooled_w) % pooled_h;
      const I cl = item / bins;
      const int64_t c = c0 + cl;
      const A grad = to_acc(grad_output[k * gs.k + c * gs.c + ph * gs.h +
                                        pw * gs.w]);
      auto add = [&](I y, I x, A v) { add_to_plane(cl, y, x, v); };
      if (is_max) {
        const I index = ((static_cast<I>(k) * static_cast<I>(s.channels) +
                          static_cast<I>(c)) * pooled_h + ph) * pooled_w + pw;
        roi_align_detail::roi_align_backward_max_bin<A, I>(
            height, width, argmax_y[index], argmax_x[index], grad, add);
      } else {
        roi_align_detail::roi_align_backward_avg_bin<A, I>(
            g, height, width, ph, pw, grad, add);
      }
    };
    auto global_add = [&](I cl, I y, I x, A v) {
      const I plane = (batch * static_cast<I>(s.channels) +
                       static_cast<I>(c0) + cl) * height * width;
      atomicAdd(grad_input + plane + y * width + x, v);
    };

    // The footprint: first and last sample coordinate along each axis.
    int64_t y0 = 0, y1 = -1, x0 = 0, x1 = -1;
    const bool bounded =
        g.grid_h > 0 && g.grid_w > 0 &&
        roi_align_detail::axis_footprint(
            roi_align_detail::sample_coord(g.start_h, 0, g.bin_h, 0, g.grid_h),
            roi_align_detail::sample_coord(g.start_h, s.pooled_h - 1, g.bin_h,
                                           g.grid_h - 1, g.grid_h),
            s.height, &y0, &y1) &&
        roi_align_detail::axis_footprint(
            roi_align_detail::sample_coord(g.start_w, 0, g.bin_w, 0, g.grid_w),
            roi_align_detail::sample_coord(g.start_w, s.pooled_w - 1, g.bin_w,
                                           g.grid_w - 1, g.grid_w),
            s.width, &x0, &x1);
    if (vec4) {
      // Whole aligned quads of columns, for the vector flush below (the map's
      // width is a multiple of 4, so a quad never crosses a row's end).
      x0 &= ~int64_t{3};
      x1 |= 3;
    }
    const int64_t fh = y1 - y0 + 1, fw = x1 - x0 + 1;
    if (!is_max && bounded) {
      // Average mode is separable: sample (iy, ix) of bin (ph, pw) gives
      // pixel (y, x) grad * wy * wx / count, where wy depends on (ph, iy, y)
      // only and wx on (pw, ix, x) only (an invalid sample has a zero axis
      // weight). So the RoI's gradient over its footprint is the product
      // Ay^T . G . Ax of the channel's PH x PW output gradient G and two
      // small axis matrices built once per block: Ay[ph][y] sums the y
      // weights of bin row ph's samples on row y (with 1/count), Ax[pw][x]
      // the x weights. No atomics until each footprint pixel is added to
      // grad_input once (a quad of columns at a time with vec4).
      const int64_t fixed = s.pooled_h * fh + s.pooled_w * fw;
      const int64_t per_channel = s.pooled_h * s.pooled_w + s.pooled_h * fw;
      if (fixed + per_channel <= kCapacity) {
        const int PH = static_cast<int>(s.pooled_h);
        const int PW = static_cast<int>(s.pooled_w);
        const int rows_n = static_cast<int>(fh), cols_n = static_cast<int>(fw);
        const int per_pass = static_cast<int>(
            min_of<int64_t>(nc, (kCapacity - fixed) / per_channel));
        A* ay_m = tile;                   // [PH][fh]
        A* ax_m = ay_m + PH * rows_n;     // [PW][fw]
        A* g_m = ax_m + PW * cols_n;      // [per_pass][PH][PW]
        A* t_m = g_m + per_pass * PH * PW;  // [per_pass][PH][fw]: G . Ax
        const A inv_count =
            A(1) / static_cast<A>(max_of(g.grid_h * g.grid_w, 1));
        // The axis matrices: entry (p, r) sums, over bin p's samples, the
        // bilinear weights they give pixel row (column) r of the footprint.
        auto axis_matrix = [&](A* m, int pooled, int n, int64_t first_pixel,
                               A start, A bin_size, int grid, I size,
                               A scale) {
          for (int i = threadIdx.x; i < pooled * n; i += blockDim.x) {
            const int p = i / n;
            const I pixel = static_cast<I>(first_pixel + i % n);
            A sum = A(0);
            for (int j = 0; j < grid; ++j) {
              const A v = roi_align_detail::sample_coord(start, p, bin_size,
                                                         j, grid);
              roi_align_detail::AxisWeights<A, I> a;
              if (!roi_align_detail::bilinear_axis(size, v, &a)) continue;
              if (a.low == pixel) sum += a.h;
              if (a.high == pixel) sum += a.l;
            }
            m[i] = sum * scale;
          }
        };
        axis_matrix(ay_m, PH, rows_n, y0, g.start_h, g.bin_h, g.grid_h,
                    height, inv_count);
        axis_matrix(ax_m, PW, cols_n, x0, g.start_w, g.bin_w, g.grid_w, width,
                    A(1));
        for (int cp = 0; cp < nc; cp += per_pass) {
          const int np = min_of(per_pass, nc - cp);
          for (int i = threadIdx.x; i < np * PH * PW; i += blockDim.x) {
            const int pw = i % PW, ph = (i / PW) % PH, cl = cp + i / (PH * PW);
            g_m[i] = to_acc(grad_output[k * gs.k + (c0 + cl) * gs.c +
                                        ph * gs.h + pw * gs.w]);
          }
          __syncthreads();  // also orders the axis matrices
          for (int i = threadIdx.x; i < np * PH * cols_n; i += blockDim.x) {
            const int x = i % cols_n, row = i / cols_n;  // row = cl * PH + ph
            const A* gr = g_m + row * PW;
            A sum = A(0);
            for (int pw = 0; pw < PW; ++pw) sum += gr[pw] * ax_m[pw * cols_n + x];
            t_m[i] = sum;
          }
          __syncthreads();
          // Pixel (cl, r, x) = sum over ph of Ay[ph][r] * T[cl][ph][x]; a
          // thread takes `step` consecutive columns (4 with vec4).
          const int step = vec4 ? 4 : 1;
          const int groups_x = cols_n / step;
          for (int i = threadIdx.x; i < np * rows_n * groups_x;
               i += blockDim.x) {
            const int xg = (i % groups_x) * step;
            const int r = (i / groups_x) % rows_n;
            const int cl = i / (groups_x * rows_n);
            A v[4] = {A(0), A(0), A(0), A(0)};
            for (int ph = 0; ph < PH; ++ph) {
              const A wy = ay_m[ph * rows_n + r];
              if (wy == A(0)) continue;
              const A* tr = t_m + (cl * PH + ph) * cols_n + xg;
              for (int e = 0; e < step; ++e) v[e] += wy * tr[e];
            }
            const I plane = (batch * static_cast<I>(s.channels) +
                             static_cast<I>(c0 + cp + cl)) * height * width;
            A* out = grad_input + plane +
                     (static_cast<I>(y0) + static_cast<I>(r)) * width +
                     static_cast<I>(x0) + static_cast<I>(xg);
            if constexpr (std::is_same<A, float>::value) {
              if (vec4) {
                if (v[0] != 0.f || v[1] != 0.f || v[2] != 0.f || v[3] != 0.f) {
                  atomic_add4(out, make_float4(v[0], v[1], v[2], v[3]));
                }
                continue;
              }
            }
            for (int e = 0; e < step; ++e) {
              if (v[e] != A(0)) atomicAdd(out + e, v[e]);
            }
          }
          __syncthreads();
        }
        continue;
      }
    }
    const int64_t area = bounded ? fh * fw : 0;
    if (!bounded || area > kCapacity) {
      // An empty grid scatters nothing (max mode then has argmax -1 too);
      // a footprint larger than the tile adds straight to global memory.
      if (g.grid_h > 0 && g.grid_w > 0) {
        for (I item = threadIdx.x; item < items; item += blockDim.x) {
          bin(item, global_add);
        }
      }
      continue;
    }
    const int tile_area = static_cast<int>(area);
    const int per_pass = min_of(nc, kCapacity / tile_area);
    const I fy0 = static_cast<I>(y0), fx0 = static_cast<I>(x0);
    const I tile_h = static_cast<I>(fh), tile_w = static_cast<I>(fw);
    for (int cp = 0; cp < nc; cp += per_pass) {
      const int np = min_of(per_pass, nc - cp);
      for (int i = threadIdx.x; i < np * tile_area; i += blockDim.x) {
        tile[i] = A(0);
      }
      __syncthreads();
      auto shared_add = [&](I cl, I y, I x, A v) {
        const I ty = y - fy0, tx = x - fx0;
        if (ty >= 0 && ty < tile_h && tx >= 0 && tx < tile_w) {
          atomicAdd(tile + ((cl - cp) * tile_h + ty) * tile_w + tx, v);
        } else {
          global_add(cl, y, x, v);
        }
      };
      const I first = static_cast<I>(cp) * bins;
      const I last = static_cast<I>(cp + np) * bins;
      for (I item = first + threadIdx.x; item < last; item += blockDim.x) {
        bin(item, shared_add);
      }
      __syncthreads();
      if constexpr (std::is_same<A, float>::value) {
        if (vec4) {
          // One 16-byte reduction per quad of columns (tile_w and fx0 are
          // multiples of 4; the tile and grad_input are 16-byte aligned).
          const int quads = np * tile_area / 4;
          const float4* tile4 = reinterpret_cast<const float4*>(tile);
          for (int i = threadIdx.x; i < quads; i += blockDim.x) {
            const float4 v = tile4[i];
            if (v.x != 0.f || v.y != 0.f || v.z != 0.f || v.w != 0.f) {
              const int cl = cp + (4 * i) / tile_area;
              const int r = (4 * i) % tile_area;
              const I plane = (batch * static_cast<I>(s.channels) +
                               static_cast<I>(c0) + cl) * height * width;
              atomic_add4(grad_input + plane +
                              (fy0 + static_cast<I>(r / tile_w)) * width +
                              fx0 + static_cast<I>(r % tile_w),
                          v);
            }
          }
          __syncthreads();
          continue;
        }
      }
      for (int i = threadIdx.x; i < np * tile_area; i += blockDim.x) {
        const A v = tile[i];
        if (v != A(0)) {
          const int cl = cp + i / tile_area;
          const int r = i % tile_area;
          global_add(static_cast<I>(cl), fy0 + static_cast<I>(r / tile_w),
                     fx0 + static_cast<I>(r % tile_w), v);
        }
      }
      __syncthreads();
    }
  }
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
                                           const RoIAlignGradStrides& strides,
                                           const acc_t<T>* rois,
                                           const acc_t<T>* argmax_y,
                                           const acc_t<T>* argmax_x,
                                           const RoIAlignShape& s,
                                           double spatial_scale,
                                           acc_t<T>* grad_input,
                                           cudaStream_t stream) {
  using A = acc_t<T>;
  // The kernel adds into grad_input: zero it here (cheaper on the host than a
  // zeros() through the dispatcher), also when there is nothing to add.
  const int64_t grad_numel = s.batch_size * s.channels * s.height * s.width;
  const cudaError_t zeroed = cudaMemsetAsync(
      grad_input, 0, static_cast<size_t>(grad_numel) * sizeof(A), stream);
  if (zeroed != cudaSuccess || s.output_numel() == 0) return zeroed;
  const auto scale = static_cast<A>(spatial_scale);
  const int64_t work =
      s.num_rois * ((s.channels + kGroupChannels - 1) / kGroupChannels);
  // One block per (RoI, channel group), capped (the kernel loops over the
  // rest).
  const auto blocks = static_cast<unsigned int>(
      min_of<int64_t>(work, int64_t{65535} * 8));
  // The flush adds whole quads of columns where they stay aligned.
  const bool vec4 = std::is_same<A, float>::value && s.width % 4 == 0 &&
                    reinterpret_cast<uintptr_t>(grad_input) % 16 == 0;
  if (fits_int32(s)) {
    roi_align_backward_kernel<T, int32_t>
        <<<blocks, cuda::kThreadsPerBlock, 0, stream>>>(
            grad_output, strides, rois, argmax_y, argmax_x, s, scale, vec4,
            grad_input);
  } else {
    roi_align_backward_kernel<T, int64_t>
        <<<blocks, cuda::kThreadsPerBlock, 0, stream>>>(
            grad_output, strides, rois, argmax_y, argmax_x, s, scale, vec4,
            grad_input);
  }
  return cudaGetLastError();
}

#define VISDET_INSTANTIATE(T)                                                \
  template cudaError_t roi_align_forward_cuda_launch<T>(                     \
      const T*, const acc_t<T>*, const RoIAlignShape&, double, T*, acc_t<T>*,       \
      acc_t<T>*, cudaStream_t);                                              \
  template cudaError_t roi_align_backward_cuda_launch<T>(                    \
      const T*, const RoIAlignGradStrides&, const acc_t<T>*, const acc_t<T>*, \
      const acc_t<T>*,                                                       \
      const RoIAlignShape&, double, acc_t<T>*, cudaStream_t);
VISDET_FOR_FLOATING_TYPES(VISDET_INSTANTIATE)
#undef VISDET_INSTANTIATE

}  // namespace visdet_ops
