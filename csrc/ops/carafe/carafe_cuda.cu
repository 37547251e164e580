// CARAFE on CUDA.
//
// carafe_naive: one thread per element of each output (forward, features
// gradient, masks gradient), straight from carafe_kernel.h. Its forward reads
// K*K mask values per output element, so the masks of one image are read C/G
// times over (from L2 at best).
//
// carafe (tiled): a block owns a 32 x 8 tile of output positions of one image
// and channel group. Forward: it loads the tile's K*K masks into shared
// memory once, then for each channel of a chunk of kChannelChunk channels
// loads the low-resolution feature patch the tile needs (with its K-1 halo)
// and every thread sums its K*K products from shared memory. Masks are read
// from DRAM once per chunk instead of once per channel, features once per
// block and channel, and output writes stay coalesced. Where the shared memory
// would exceed 48 KiB (large K, float64) carafe's forward falls back to the
// direct kernel. Backward: the features gradient is a gather in both;
// carafe's handles up to 8 channels per thread, reusing each mask value for
// all of them, and fewer (down to the direct kernel) where that would leave
// too few threads to fill the GPU. The masks gradient is the direct kernel in
// both (see carafe_backward_cuda_launch).
#include <cstdint>

#include "carafe_kernel.h"
#include "carafe_launch.h"
#include "common/cuda_helpers.cuh"
#include "common/scalar.h"

namespace visdet_ops {
namespace {

constexpr int kTileW = 32;
constexpr int kTileH = 8;
constexpr int kTileThreads = kTileW * kTileH;
constexpr int64_t kChannelChunk = 32;
constexpr size_t kMaxSharedBytes = 48 * 1024;

template <typename T>
struct ToAcc {
  __device__ acc_t<T> operator()(T v) const { return to_acc(v); }
};

template <typename T>
__global__ void carafe_forward_naive_kernel(const T* __restrict__ features,
                                            const T* __restrict__ masks,
                                            CarafeShape s,
                                            T* __restrict__ output) {
  cuda::grid_stride_loop<int64_t>(s.output_numel(), [&](int64_t e) {
    output[e] = from_acc<T>(carafe_detail::forward_element<acc_t<T>>(
        e, features, masks, s, ToAcc<T>()));
  });
}

template <typename T>
__global__ void carafe_grad_features_kernel(const T* __restrict__ grad_output,
                                            const T* __restrict__ masks,
                                            CarafeShape s,
                                            T* __restrict__ grad_features) {
  cuda::grid_stride_loop<int64_t>(s.features_numel(), [&](int64_t e) {
    grad_features[e] =
        from_acc<T>(carafe_detail::grad_features_element<acc_t<T>>(
            e, grad_output, masks, s, ToAcc<T>()));
  });
}

template <typename T>
__global__ void carafe_grad_masks_naive_kernel(const T* __restrict__ grad_output,
                                               const T* __restrict__ features,
                                               CarafeShape s,
                                               T* __restrict__ grad_masks) {
  cuda::grid_stride_loop<int64_t>(s.masks_numel(), [&](int64_t e) {
    grad_masks[e] =
        from_acc<T>(carafe_detail::grad_masks_element<acc_t<T>>(
            e, grad_output, features, s, ToAcc<T>()));
  });
}

// Low-resolution rows (columns) that the windows of `tile` consecutive
// output rows starting anywhere can touch: floor((a + tile - 1) / S) -
// floor(a / S) <= (tile - 1) / S + 1, plus the window.
VISDET_HOST_DEVICE inline int64_t patch_extent(int64_t tile, int64_t scale,
                                               int64_t r) {
  return (tile - 1) / scale + 2 + 2 * r;
}

// Features gradient of carafe: one thread per low-resolution position and
// chunk of kGradChunk channels of one group. Every (mask, position) value it
// reads serves all the chunk's channels, so masks are read C/G/kGradChunk
// times instead of C/G times (the direct gather's cost).
template <typename T, int kGradChunk>
__global__ void carafe_grad_features_chunked_kernel(
    const T* __restrict__ grad_output, const T* __restrict__ masks,
    CarafeShape s, int64_t chunks_per_group, T* __restrict__ grad_features) {
  using A = acc_t<T>;
  const int64_t K = s.kernel, S = s.scale, r = (K - 1) / 2;
  const int64_t Ho = s.out_h(), Wo = s.out_w(), ohw = Ho * Wo;
  const int64_t cpg = s.channels / s.groups;
  const int64_t total = s.batch * s.groups * chunks_per_group * s.height * s.width;
  cuda::grid_stride_loop<int64_t>(total, [&](int64_t e) {
    const int64_t x = e % s.width;
    const int64_t y = (e / s.width) % s.height;
    const int64_t chunk = (e / s.width / s.height) % (s.groups * chunks_per_group);
    const int64_t n = e / s.width / s.height / (s.groups * chunks_per_group);
    const int64_t g = chunk / chunks_per_group;
    const int64_t c0 = g * cpg + (chunk % chunks_per_group) * kGradChunk;
    const int64_t left = (g + 1) * cpg - c0;
    const int nc = static_cast<int>(left < kGradChunk ? left : kGradChunk);
    const T* grad = grad_output + (n * s.channels + c0) * ohw;
    const T* mask_base = masks + (n * s.mask_channels() + g * K * K) * ohw;
    A acc[kGradChunk];
#pragma unroll
    for (int i = 0; i < kGradChunk; ++i) acc[i] = A(0);
    for (int64_t iy = 0; iy < K; ++iy) {
      const int64_t h = y - iy + r;
      if (h < 0 || h >= s.height) continue;
      for (int64_t ix = 0; ix < K; ++ix) {
        const int64_t w = x - ix + r;
        if (w < 0 || w >= s.width) continue;
        const T* mask = mask_base + (iy * K + ix) * ohw;
        for (int64_t a = 0; a < S; ++a) {
          const int64_t row = (h * S + a) * Wo + w * S;
          for (int64_t b = 0; b < S; ++b) {
            const A m = to_acc(mask[row + b]);
#pragma unroll
            for (int i = 0; i < kGradChunk; ++i) {
              if (i < nc) acc[i] += to_acc(grad[i * ohw + row + b]) * m;
            }
          }
        }
      }
    }
    T* out = grad_features + ((n * s.channels + c0) * s.height + y) * s.width + x;
    const int64_t hw = s.height * s.width;
#pragma unroll
    for (int i = 0; i < kGradChunk; ++i) {
      if (i < nc) out[i * hw] = from_acc<T>(acc[i]);
    }
  });
}

// Geometry of one tile: the low-resolution patch [patch_h, patch_w] whose
// origin is (y0, x0), covering every window of the tile's outputs.
struct Tile {
  int64_t ph, pw;        // this thread's output position
  bool valid;
  int64_t y0, x0;        // patch origin in the feature map
  int patch_h, patch_w;  // patch size (an upper bound for every tile)
  int local_y, local_x;  // this thread's window origin inside the patch
};

__device__ __forceinline__ Tile make_tile(const CarafeShape& s) {
  Tile t;
  const int64_t r = (s.kernel - 1) / 2;
  const int64_t ph0 = static_cast<int64_t>(blockIdx.y) * kTileH;
  const int64_t pw0 = static_cast<int64_t>(blockIdx.x) * kTileW;
  t.ph = ph0 + threadIdx.y;
  t.pw = pw0 + threadIdx.x;
  t.valid = t.ph < s.out_h() && t.pw < s.out_w();
  t.y0 = ph0 / s.scale - r;
  t.x0 = pw0 / s.scale - r;
  t.patch_h = static_cast<int>(patch_extent(kTileH, s.scale, r));
  t.patch_w = static_cast<int>(patch_extent(kTileW, s.scale, r));
  t.local_y = static_cast<int>(t.ph / s.scale - ph0 / s.scale);
  t.local_x = static_cast<int>(t.pw / s.scale - pw0 / s.scale);
  return t;
}

template <typename T, typename A>
__device__ __forceinline__ void load_patch(const T* __restrict__ plane,
                                           const CarafeShape& s, const Tile& t,
                                           int tid, A* patch) {
  for (int i = tid; i < t.patch_h * t.patch_w; i += kTileThreads) {
    const int64_t y = t.y0 + i / t.patch_w;
    const int64_t x = t.x0 + i % t.patch_w;
    patch[i] = (y >= 0 && y < s.height && x >= 0 && x < s.width)
                   ? to_acc(plane[y * s.width + x])
                   : A(0);
  }
}

// grid: (tiles across W*S, tiles across H*S, N * G * chunks per group).
template <typename T>
__global__ void __launch_bounds__(kTileThreads)
    carafe_forward_tiled_kernel(const T* __restrict__ features,
                                const T* __restrict__ masks, CarafeShape s,
                                int64_t chunks, T* __restrict__ output) {
  using A = acc_t<T>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  A* mask_s = reinterpret_cast<A*>(smem_raw);
  const int64_t KK = s.kernel * s.kernel;
  A* patch = mask_s + KK * kTileThreads;

  const int tid = threadIdx.y * kTileW + threadIdx.x;
  const Tile t = make_tile(s);
  const int64_t z = blockIdx.z;
  const int64_t n = z / (s.groups * chunks);
  const int64_t g = (z / chunks) % s.groups;
  const int64_t cpg = s.channels / s.groups;
  const int64_t c_begin = g * cpg + (z % chunks) * kChannelChunk;
  const int64_t c_end = min(c_begin + kChannelChunk, (g + 1) * cpg);
  const int64_t Ho = s.out_h(), Wo = s.out_w();

  for (int64_t j = 0; j < KK; ++j) {
    mask_s[j * kTileThreads + tid] =
        t.valid ? to_acc(masks[((n * s.mask_channels() + g * KK + j) * Ho +
                                      t.ph) * Wo + t.pw])
                : A(0);
  }
  for (int64_t c = c_begin; c < c_end; ++c) {
    __syncthreads();  // the previous channel's patch is no longer read
    load_patch(features + (n * s.channels + c) * s.height * s.width, s, t, tid,
               patch);
    __syncthreads();
    if (!t.valid) continue;
    A acc = A(0);
    for (int iy = 0; iy < s.kernel; ++iy) {
      const A* row = patch + (t.local_y + iy) * t.patch_w + t.local_x;
      const A* m = mask_s + iy * s.kernel * kTileThreads + tid;
      for (int ix = 0; ix < s.kernel; ++ix) acc += row[ix] * m[ix * kTileThreads];
    }
    output[((n * s.channels + c) * Ho + t.ph) * Wo + t.pw] = from_acc<T>(acc);
  }
}

// Shared memory of the tiled kernels, or 0 when they do not fit.
template <typename T>
size_t tiled_shared_bytes(const CarafeShape& s) {
  const int64_t r = (s.kernel - 1) / 2;
  const int64_t patch =
      patch_extent(kTileH, s.scale, r) * patch_extent(kTileW, s.scale, r);
  const int64_t n = s.kernel * s.kernel * kTileThreads + patch;
  const size_t bytes = static_cast<size_t>(n) * sizeof(acc_t<T>);
  return bytes <= kMaxSharedBytes ? bytes : 0;
}

dim3 tile_grid(const CarafeShape& s, int64_t z) {
  return dim3(static_cast<unsigned>((s.out_w() + kTileW - 1) / kTileW),
              static_cast<unsigned>((s.out_h() + kTileH - 1) / kTileH),
              static_cast<unsigned>(z));
}

// gridDim.y and gridDim.z are limited to 65535.
bool tile_grid_fits(const CarafeShape& s, int64_t z) {
  return (s.out_h() + kTileH - 1) / kTileH <= 65535 && z <= 65535 &&
         (s.out_w() + kTileW - 1) / kTileW <= 0x7fffffff;
}

// Streaming multiprocessors of the current device (132 on an H100 SXM).
int64_t sm_count() {
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
    (void)cudaGetLastError();  // clear it: the count only tunes the launch
    return 1;
  }
  return sms > 0 ? sms : 1;
}

// Channels per thread of carafe's features gradient: the largest of 8, 4, 2
// that still gives a full wave (2048 threads per SM), else 1 (the direct
// kernel).
int grad_features_chunk(const CarafeShape& s) {
  const int64_t positions = s.batch * s.height * s.width;
  const int64_t cpg = s.channels / s.groups;
  const int64_t wave = 2048 * sm_count();
  for (int chunk : {8, 4, 2}) {
    if (positions * s.groups * ((cpg + chunk - 1) / chunk) >= wave) return chunk;
  }
  return 1;
}

template <typename T, int kChunk>
void launch_grad_features_chunked(const T* grad_output, const T* masks,
                                  const CarafeShape& s, T* grad_features,
                                  cudaStream_t stream) {
  const int64_t cpg = s.channels / s.groups;
  const int64_t chunks = (cpg + kChunk - 1) / kChunk;
  const int64_t total = s.batch * s.groups * chunks * s.height * s.width;
  carafe_grad_features_chunked_kernel<T, kChunk>
      <<<cuda::blocks_for(total), cuda::kThreadsPerBlock, 0, stream>>>(
          grad_output, masks, s, chunks, grad_features);
}

}  // namespace

template <typename T>
cudaError_t carafe_forward_cuda_launch(const T* features, const T* masks,
                                       const CarafeShape& s, bool tiled,
                                       T* output, cudaStream_t stream) {
  const int64_t n = s.output_numel();
  if (n == 0) return cudaSuccess;
  const int64_t cpg = s.channels / s.groups;
  const int64_t chunks = (cpg + kChannelChunk - 1) / kChannelChunk;
  const size_t smem = tiled_shared_bytes<T>(s);
  if (tiled && smem > 0 && tile_grid_fits(s, s.batch * s.groups * chunks)) {
    carafe_forward_tiled_kernel<T>
        <<<tile_grid(s, s.batch * s.groups * chunks), dim3(kTileW, kTileH), smem,
           stream>>>(features, masks, s, chunks, output);
  } else {
    carafe_forward_naive_kernel<T>
        <<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, stream>>>(
            features, masks, s, output);
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t carafe_backward_cuda_launch(const T* grad_output, const T* features,
                                        const T* masks, const CarafeShape& s,
                                        bool tiled, T* grad_features,
                                        T* grad_masks, cudaStream_t stream) {
  if (s.features_numel() > 0) {
    switch (tiled ? grad_features_chunk(s) : 1) {
      case 8:
        launch_grad_features_chunked<T, 8>(grad_output, masks, s, grad_features, stream);
        break;
      case 4:
        launch_grad_features_chunked<T, 4>(grad_output, masks, s, grad_features, stream);
        break;
      case 2:
        launch_grad_features_chunked<T, 2>(grad_output, masks, s, grad_features, stream);
        break;
      default:
        carafe_grad_features_kernel<T>
            <<<cuda::blocks_for(s.features_numel()), cuda::kThreadsPerBlock, 0,
               stream>>>(grad_output, masks, s, grad_features);
    }
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
  }
  if (s.masks_numel() == 0) return cudaSuccess;
  // The masks gradient is the direct kernel for both: a tiled version (K*K
  // shared-memory accumulators per output, looping over channels) measured
  // slower at every CARAFE-FPN level on the H100 (905 vs 711 us at 100x168,
  // 257 vs 151 us at 50x84; docs/benchmarks.md, run 11).
  carafe_grad_masks_naive_kernel<T>
      <<<cuda::blocks_for(s.masks_numel()), cuda::kThreadsPerBlock, 0, stream>>>(
          grad_output, features, s, grad_masks);
  return cudaGetLastError();
}

#define VISDET_INSTANTIATE(T)                                                 \
  template cudaError_t carafe_forward_cuda_launch<T>(                         \
      const T*, const T*, const CarafeShape&, bool, T*, cudaStream_t);        \
  template cudaError_t carafe_backward_cuda_launch<T>(                        \
      const T*, const T*, const T*, const CarafeShape&, bool, T*, T*,         \
      cudaStream_t);
VISDET_FOR_FLOATING_TYPES(VISDET_INSTANTIATE)
#undef VISDET_INSTANTIATE

}  // namespace visdet_ops
