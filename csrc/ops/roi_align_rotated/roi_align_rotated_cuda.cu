#include <cstdint>
#include <type_traits>

#include "common/cuda_helpers.cuh"
#include "roi_align_rotated_kernel.h"
#include "roi_align_rotated_launch.h"

namespace visdet_ops {
namespace {

using roi_align_rotated_detail::RotatedGeometry;
using roi_align_rotated_detail::Sample;

// Both kernels: one block per (RoI, group of channels), walked
// channel-group-major (k = w % K), so the blocks in flight read (or add to) a
// few channel groups' planes of every RoI, which stay in L2 while the RoIs
// reach them. A block computes its RoI's geometry once.
//
// The forward computes each sample where it is used, in registers (mmcv's
// one-output-per-thread loop over the bin's grid). It is a gather bound by
// its loads, and a table of precomputed samples in shared memory added two
// more loads per sample than the arithmetic it saved was worth (run 29, the
// same inputs: 1.09x-1.21x mmcv at sampling_ratio 0 in float32, where the
// table was 0.80x-0.97x; 1.74x-1.90x in float16). The backward keeps its
// table (the bilinear corners and weights once per block, sample-major:
// entry j * bins + b, so a warp on consecutive bins reads consecutive
// entries): its scatter is bound by the atomics.
constexpr int kForwardGroupChannels = 32;
constexpr int kBackwardGroupChannels = 16;
// The backward's shared memory per block, 48 KiB (the static limit): its
// registers allow 4 blocks of 256 threads per SM on sm_90 anyway, which
// 4 x 48 KiB leaves room for. The samples' 28 KiB hold 896, up to 4x4 per
// bin of a 7x7 output.
constexpr int kBackwardSampleBytes = 28 * 1024;
// The backward's accumulation tile (roi_align_cuda.cu's scheme): 5120 float
// pixels.
constexpr int kTileBytes = 20 * 1024;

template <typename T, typename I>
__global__ void __launch_bounds__(cuda::kThreadsPerBlock)
    roi_align_rotated_forward_kernel(const T* __restrict__ input,
                                     const acc_t<T>* __restrict__ rois,
                                     RoIAlignRotatedShape s,
                                     acc_t<T> spatial_scale,
                                     T* __restrict__ output) {
  using A = acc_t<T>;
  using S = Sample<A, I>;
  const I height = static_cast<I>(s.height), width = static_cast<I>(s.width);
  const I pooled_w = static_cast<I>(s.pooled_w);
  const I bins = static_cast<I>(s.pooled_h * s.pooled_w);
  const I plane_size = height * width;
  const int64_t groups =
      (s.channels + kForwardGroupChannels - 1) / kForwardGroupChannels;
  const int64_t work = s.num_rois * groups;

  for (int64_t w = blockIdx.x; w < work; w += gridDim.x) {
    const int64_t k = w % s.num_rois;
    const int64_t c0 = (w / s.num_rois) * kForwardGroupChannels;
    const int nc = static_cast<int>(
        min_of<int64_t>(kForwardGroupChannels, s.channels - c0));
    const I items = static_cast<I>(nc) * bins;
    // The group's outputs are one contiguous run of nc * bins values.
    T* out = output + (k * s.channels + c0) * (s.pooled_h * s.pooled_w);
    const A* roi = rois + k * kRotatedRoIColumns;
    // Uniform over the block: every thread skips the same RoI.
    if (roi_flags(roi, s.batch_size, kRotatedRoIColumns) != 0) {
      for (I i = threadIdx.x; i < items; i += blockDim.x) {
        out[i] = from_acc<T>(quiet_nan<A>());
      }
      continue;
    }
    const RotatedGeometry<A> g = roi_align_rotated_detail::rotated_geometry(
        roi, spatial_scale, s.pooled_h, s.pooled_w, s.sampling_ratio,
        s.aligned, s.clockwise, s.height, s.width);
    const T* planes = input + (g.batch * s.channels + c0) * s.height * s.width;
    const A count = static_cast<A>(max_of(g.grid_h * g.grid_w, 1));
    for (I i = threadIdx.x; i < items; i += blockDim.x) {
      const I cl = i / bins;
      const I b = i - cl * bins;
      const I ph = b / pooled_w, pw = b - ph * pooled_w;
      const T* plane = planes + cl * plane_size;
      A sum = A(0);
      for (int iy = 0; iy < g.grid_h; ++iy) {
        for (int ix = 0; ix < g.grid_w; ++ix) {
          A y, x;
          roi_align_rotated_detail::sample_point(g, static_cast<int64_t>(ph),
                                                 static_cast<int64_t>(pw), iy,
                                                 ix, &y, &x);
          const S smp = roi_align_rotated_detail::bilinear_sample<A, I>(
              height, width, y, x);
          if (smp.valid()) {
            sum += roi_align_rotated_detail::sample_value(plane, width, smp);
          }
        }
      }
      out[i] = from_acc<T>(sum / count);
    }
  }
}

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

// The backward. Each output bin scatters its gradient into the 4 pixels
// around each of its samples; nearby samples share pixels, so a global
// atomicAdd per sample and corner (mmcv's kernel) contends. Instead the block
// accumulates into a shared-memory tile of the RoI's footprint (the
// axis-aligned box of its rotated sample grid, sample_box) and then adds each
// touched pixel to global memory once. A footprint larger than the tile, or
// a sample outside it (only through rounding), adds to global memory
// directly. grad_output is read through its strides: the expanded gradient
// of out.sum() is not copied. grad_input is in the compute type (a float32
// buffer for 16-bit storage): float atomics are native on every supported
// arch, and 16-bit ones would round every partial sum.
//
// vec4 is an int, not a bool: see roi_pool_cuda.cu's channel_major (a bool
// kernel parameter gives x86_64 and aarch64 builds different cubins).
template <typename T, typename I>
__global__ void __launch_bounds__(cuda::kThreadsPerBlock)
    roi_align_rotated_backward_kernel(const T* __restrict__ grad_output,
                                      RoIAlignRotatedGradStrides gs,
                                      const acc_t<T>* __restrict__ rois,
                                      RoIAlignRotatedShape s,
                                      acc_t<T> spatial_scale, int vec4,
                                      acc_t<T>* grad_input) {
  using A = acc_t<T>;
  using S = Sample<A, I>;
  __shared__ __align__(16) unsigned char sample_bytes[kBackwardSampleBytes];
  __shared__ __align__(16) unsigned char tile_bytes[kTileBytes];
  S* samples = reinterpret_cast<S*>(sample_bytes);
  A* tile = reinterpret_cast<A*>(tile_bytes);
  constexpr int kSampleCapacity =
      kBackwardSampleBytes / static_cast<int>(sizeof(S));
  constexpr int kTileCapacity = kTileBytes / static_cast<int>(sizeof(A));

  const I height = static_cast<I>(s.height), width = static_cast<I>(s.width);
  const I pooled_w = static_cast<I>(s.pooled_w);
  const I bins = static_cast<I>(s.pooled_h * s.pooled_w);
  const int64_t groups =
      (s.channels + kBackwardGroupChannels - 1) / kBackwardGroupChannels;
  const int64_t work = s.num_rois * groups;

  for (int64_t w = blockIdx.x; w < work; w += gridDim.x) {
    const int64_t k = w % s.num_rois;
    const int64_t c0 = (w / s.num_rois) * kBackwardGroupChannels;
    const int nc = static_cast<int>(
        min_of<int64_t>(kBackwardGroupChannels, s.channels - c0));
    const A* roi = rois + k * kRotatedRoIColumns;
    // Uniform over the block: every thread skips the same RoI.
    if (roi_flags(roi, s.batch_size, kRotatedRoIColumns) != 0) continue;
    const RotatedGeometry<A> g = roi_align_rotated_detail::rotated_geometry(
        roi, spatial_scale, s.pooled_h, s.pooled_w, s.sampling_ratio,
        s.aligned, s.clockwise, s.height, s.width);
    const int per_bin = g.grid_h * g.grid_w;
    if (per_bin == 0) continue;  // an empty grid scatters nothing
    const int64_t total = static_cast<int64_t>(bins) * per_bin;
    const bool tabled = total <= kSampleCapacity;
    if (tabled) {
      __syncthreads();  // the previous RoI's readers are done with the table
      const int n = static_cast<int>(total), nb = static_cast<int>(bins);
      for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const int j = i / nb;
        samples[i] = roi_align_rotated_detail::rotated_sample<A, I>(
            g, pooled_w, height, width, static_cast<I>(i - j * nb), j);
      }
      __syncthreads();
    }
    const I batch = static_cast<I>(g.batch);
    const A count = static_cast<A>(per_bin);

    // Sample j of bin b of channel cl scatters its share of the bin's
    // gradient (grad_output read through its strides). Work item i of a run
    // enumerates (cl, j, b) with b fastest: the threads of a warp take
    // consecutive bins, so they read consecutive gradients and table entries
    // and add to different pixels.
    auto scatter = [&](auto i, auto add_to_plane) {
      using J = decltype(i);
      const J b = i % static_cast<J>(bins);
      const J rest = i / static_cast<J>(bins);
      const int j = static_cast<int>(rest % per_bin);
      const I cl = static_cast<I>(rest / per_bin);
      const S smp = tabled ? samples[static_cast<I>(j) * bins + static_cast<I>(b)]
                           : roi_align_rotated_detail::rotated_sample<A, I>(
                                 g, pooled_w, height, width, static_cast<I>(b),
                                 j);
      if (!smp.valid()) return;
      const I ph = static_cast<I>(b) / pooled_w;
      const I pw = static_cast<I>(b) - ph * pooled_w;
      const int64_t c = c0 + cl;
      const A share = to_acc(grad_output[k * gs.k + c * gs.c + ph * gs.h +
                                         pw * gs.w]) /
                      count;
      roi_align_rotated_detail::scatter_sample(
          smp, share, [&](I y, I x, A v) { add_to_plane(cl, y, x, v); });
    };
    // Work items [first, last) (units of one sample of one bin), in int32
    // where the run's indices fit (64-bit division is several times slower).
    auto scatter_run = [&](int64_t first, int64_t last, auto add_to_plane) {
      if (last <= int64_t{INT32_MAX} - 1024) {  // i + blockDim.x cannot wrap
        for (int32_t i = static_cast<int32_t>(first) + threadIdx.x;
             i < static_cast<int32_t>(last); i += blockDim.x) {
          scatter(i, add_to_plane);
        }
      } else {
        for (int64_t i = first + threadIdx.x; i < last; i += blockDim.x) {
          scatter(i, add_to_plane);
        }
      }
    };
    auto global_add = [&](I cl, I y, I x, A v) {
      const I plane = (batch * static_cast<I>(s.channels) +
                       static_cast<I>(c0) + cl) * height * width;
      atomicAdd(grad_input + plane + y * width + x, v);
    };
    // One channel's work items: every sample of every bin.
    const int64_t per_channel = static_cast<int64_t>(bins) * per_bin;

    // The footprint: the box of every sample, clamped to the map.
    int64_t y0 = 0, y1 = -1, x0 = 0, x1 = -1;
    A y_min, y_max, x_min, x_max;
    const bool bounded =
        roi_align_rotated_detail::sample_box(g, s.pooled_h, s.pooled_w, &y_min,
                                             &y_max, &x_min, &x_max) &&
        roi_align_rotated_detail::axis_footprint(y_min, y_max, s.height, &y0,
                                                 &y1) &&
        roi_align_rotated_detail::axis_footprint(x_min, x_max, s.width, &x0,
                                                 &x1);
    if (vec4) {
      // Whole aligned quads of columns, for the vector flush below (the map's
      // width is a multiple of 4, so a quad never crosses a row's end).
      x0 &= ~int64_t{3};
      x1 |= 3;
    }
    const int64_t fh = y1 - y0 + 1, fw = x1 - x0 + 1;
    const int64_t area = bounded ? fh * fw : 0;
    if (!bounded || area > kTileCapacity) {
      scatter_run(0, nc * per_channel, global_add);
      continue;
    }
    const int tile_area = static_cast<int>(area);
    const int per_pass = min_of(nc, kTileCapacity / tile_area);
    const I fy0 = static_cast<I>(y0), fx0 = static_cast<I>(x0);
    const I tile_h = static_cast<I>(fh), tile_w = static_cast<I>(fw);
    for (int cp = 0; cp < nc; cp += per_pass) {
      const int np = min_of(per_pass, nc - cp);
      // Also orders the previous pass's (or RoI's) flush before the zeroing.
      __syncthreads();
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
      scatter_run(cp * per_channel, (cp + np) * per_channel, shared_add);
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
    }
  }
}

// 32-bit indexing when every output index and every input offset (plus one
// grid stride, so the loop variable cannot wrap) fits in int32.
bool fits_int32(const RoIAlignRotatedShape& s) {
  constexpr int64_t limit = cuda::kMaxInt32LoopSize;
  const int64_t input_plane = s.channels * s.height * s.width;
  // The kernels skip a RoI whose batch index is outside [0, batch_size), so
  // one image past the last is the largest offset ever formed.
  return s.output_numel() < limit && input_plane * (s.batch_size + 1) < limit;
}

unsigned int blocks_for_work(int64_t work) {
  return static_cast<unsigned int>(min_of<int64_t>(work, int64_t{65535} * 8));
}

}  // namespace

template <typename T>
cudaError_t roi_align_rotated_forward_cuda_launch(
    const T* input, const acc_t<T>* rois, const RoIAlignRotatedShape& s,
    double spatial_scale, T* output, cudaStream_t stream) {
  if (s.output_numel() == 0) return cudaSuccess;
  const auto scale = static_cast<acc_t<T>>(spatial_scale);
  const unsigned int blocks = blocks_for_work(
      s.num_rois *
      ((s.channels + kForwardGroupChannels - 1) / kForwardGroupChannels));
  if (fits_int32(s)) {
    roi_align_rotated_forward_kernel<T, int32_t>
        <<<blocks, cuda::kThreadsPerBlock, 0, stream>>>(input, rois, s, scale,
                                                        output);
  } else {
    roi_align_rotated_forward_kernel<T, int64_t>
        <<<blocks, cuda::kThreadsPerBlock, 0, stream>>>(input, rois, s, scale,
                                                        output);
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t roi_align_rotated_backward_cuda_launch(
    const T* grad_output, const RoIAlignRotatedGradStrides& strides,
    const acc_t<T>* rois, const RoIAlignRotatedShape& s, double spatial_scale,
    acc_t<T>* grad_input, cudaStream_t stream) {
  using A = acc_t<T>;
  // The kernel adds into grad_input: zero it here (cheaper on the host than a
  // zeros() through the dispatcher), also when there is nothing to add.
  const int64_t grad_numel = s.batch_size * s.channels * s.height * s.width;
  const cudaError_t zeroed = cudaMemsetAsync(
      grad_input, 0, static_cast<size_t>(grad_numel) * sizeof(A), stream);
  if (zeroed != cudaSuccess || s.output_numel() == 0) return zeroed;
  const auto scale = static_cast<A>(spatial_scale);
  const unsigned int blocks = blocks_for_work(
      s.num_rois *
      ((s.channels + kBackwardGroupChannels - 1) / kBackwardGroupChannels));
  // The flush adds whole quads of columns where they stay aligned.
  const int vec4 = std::is_same<A, float>::value && s.width % 4 == 0 &&
                   reinterpret_cast<uintptr_t>(grad_input) % 16 == 0;
  if (fits_int32(s)) {
    roi_align_rotated_backward_kernel<T, int32_t>
        <<<blocks, cuda::kThreadsPerBlock, 0, stream>>>(
            grad_output, strides, rois, s, scale, vec4, grad_input);
  } else {
    roi_align_rotated_backward_kernel<T, int64_t>
        <<<blocks, cuda::kThreadsPerBlock, 0, stream>>>(
            grad_output, strides, rois, s, scale, vec4, grad_input);
  }
  return cudaGetLastError();
}

#define VISDET_INSTANTIATE(T)                                             \
  template cudaError_t roi_align_rotated_forward_cuda_launch<T>(          \
      const T*, const acc_t<T>*, const RoIAlignRotatedShape&, double, T*, \
      cudaStream_t);                                                      \
  template cudaError_t roi_align_rotated_backward_cuda_launch<T>(         \
      const T*, const RoIAlignRotatedGradStrides&, const acc_t<T>*,       \
      const RoIAlignRotatedShape&, double, acc_t<T>*, cudaStream_t);
VISDET_FOR_FLOATING_TYPES(VISDET_INSTANTIATE)
#undef VISDET_INSTANTIATE

}  // namespace visdet_ops
