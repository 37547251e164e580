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


// ---------------------------------------------------------------------------
// Tiled backward (3x3 kernels, the DCN case). The plain kernel above spends
// its time in L2: every (sample, channel) does 4 scattered loads and 4
// scattered atomicAdds into grad_input (ncu on the H100, 128 ch 64x64 batch
// 8: L2 throughput 84%, DRAM 9%). Here a block owns a kTileW x kTileH tile
// of output pixels of one image and deform group, all KK kernel points of
// each pixel (a thread per pixel, KK samples in registers) and a chunk of
// kTileChannels channels. Per channel it stages the input window its samples
// can reach (the tile's receptive field plus kMargin pixels of offset) in
// shared memory, accumulates the grad_input contributions into a shared
// window with shared-memory atomics, and adds the window to grad_input once:
// a few global atomics per pixel instead of 4 * KK. Samples whose corners
// leave the window (offsets larger than kMargin) read and add globally.
constexpr int kTileW = 32;
constexpr int kTileH = 8;
constexpr int kTileThreads = kTileW * kTileH;
constexpr int kMargin = 4;
constexpr int64_t kTileChannels = 16;
constexpr int kTiledPoints = 9;
constexpr size_t kTiledMaxSharedBytes = 32 * 1024;

struct Window {
  int64_t y0, x0;  // image coordinates of cell (0, 0)
  int h, w;
};

__host__ __device__ inline Window window_of(const DeformConvShape& s,
                                            int64_t oh0, int64_t ow0) {
  Window win;
  win.y0 = oh0 * s.stride_h - s.pad_h - kMargin;
  win.x0 = ow0 * s.stride_w - s.pad_w - kMargin;
  win.h = static_cast<int>((kTileH - 1) * s.stride_h +
                           (s.kernel_h - 1) * s.dilation_h + 2 + 2 * kMargin);
  win.w = static_cast<int>((kTileW - 1) * s.stride_w +
                           (s.kernel_w - 1) * s.dilation_w + 2 + 2 * kMargin);
  return win;
}

struct TiledGrid {
  int64_t tiles_w, tiles_h, chunks;
  __host__ __device__ int64_t blocks(const DeformConvShape& s) const {
    return tiles_w * tiles_h * s.batch * s.deform_groups * chunks;
  }
};

__host__ __device__ inline TiledGrid tiled_grid(const DeformConvShape& s) {
  TiledGrid t;
  t.tiles_w = (s.out_w + kTileW - 1) / kTileW;
  t.tiles_h = (s.out_h + kTileH - 1) / kTileH;
  t.chunks = (s.channels_per_group() + kTileChannels - 1) / kTileChannels;
  return t;
}

template <typename A>
size_t tiled_shared_bytes(const DeformConvShape& s) {
  const Window win = window_of(s, 0, 0);
  return 2 * static_cast<size_t>(win.h) * static_cast<size_t>(win.w) * sizeof(A);
}

template <typename A>
bool use_tiled(const DeformConvShape& s) {
  static const bool enabled = [] {  // TEMPORARY knob, removed once measured
    const char* v = std::getenv("VISDET_OPS_DCN_TILED");
    return v == nullptr || std::atoi(v) != 0;
  }();
  if (!enabled) return false;
  if (s.kernel_points() != kTiledPoints || s.channels_per_group() == 0) return false;
  if (s.stride_h > 4 || s.stride_w > 4 || s.dilation_h > 4 || s.dilation_w > 4) return false;
  return tiled_shared_bytes<A>(s) <= kTiledMaxSharedBytes &&
         tiled_grid(s).blocks(s) <= 0x7fffffffLL;
}

template <typename T, typename A>
__global__ void __launch_bounds__(kTileThreads, 2) deform_conv_col2im_tiled_kernel(
    const T* __restrict__ input, const T* __restrict__ offset,
    const T* __restrict__ mask, T* __restrict__ columns, DeformConvShape s,
    A* __restrict__ grad_input, A* __restrict__ grad_offset,
    A* __restrict__ grad_mask) {
  constexpr int KK = kTiledPoints;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const TiledGrid grid = tiled_grid(s);
  int64_t block = blockIdx.x;
  const int64_t chunk = block % grid.chunks;
  block /= grid.chunks;
  const int64_t tw = block % grid.tiles_w;
  block /= grid.tiles_w;
  const int64_t th = block % grid.tiles_h;
  block /= grid.tiles_h;
  const int64_t group = block % s.deform_groups;
  const int64_t b = block / s.deform_groups;

  const int64_t oh0 = th * kTileH, ow0 = tw * kTileW;
  const Window win = window_of(s, oh0, ow0);
  const int cells = win.h * win.w;
  A* patch = reinterpret_cast<A*>(smem_raw);
  A* gwin = patch + cells;

  const int tid = threadIdx.x;
  const int64_t oh = oh0 + tid / kTileW, ow = ow0 + tid % kTileW;
  const bool valid = oh < s.out_h && ow < s.out_w;
  const int64_t plane = s.out_plane();
  const int64_t width = s.columns_width();
  const int64_t pixel = oh * s.out_w + ow;
  const int64_t column = b * plane + pixel;
  const int64_t hw = s.height * s.width;
  const int64_t cpg = s.channels_per_group();
  const int64_t c_begin = chunk * kTileChannels;
  const int64_t c_end = min_of(cpg, c_begin + kTileChannels);

  // The KK samples of this pixel, kept in registers across the channels:
  // fractional parts, modulation, top-left corner (image index, and window
  // index or -1 when the 2x2 corners are not all inside the window) and which
  // corners lie in the image (bits 0-3: 00, 01, 10, 11; none: the sample is
  // outside the map and 0).
  A lys[KK], lxs[KK], ms[KK];
  int64_t gidx[KK];
  int wi[KK];
  unsigned flags[KK];
  A gy[KK], gx[KK], gm[KK];
#pragma unroll
  for (int k = 0; k < KK; ++k) {
    gy[k] = gx[k] = gm[k] = A(0);
    lys[k] = lxs[k] = ms[k] = A(0);
    gidx[k] = 0;
    wi[k] = -1;
    flags[k] = 0;
    if (valid) {
      const deform_conv_detail::Sample<A> p = deform_conv_detail::locate<A>(
          (group * KK + k) * width + column, offset, mask, s, ToAcc());
      const deform_conv_detail::Corners<A> c =
          deform_conv_detail::corners(p.y, p.x, s.height, s.width);
      lys[k] = c.ly;
      lxs[k] = c.lx;
      ms[k] = p.m;
      gidx[k] = c.y0 * s.width + c.x0;
      flags[k] = (c.v00 ? 1u : 0u) | (c.v01 ? 2u : 0u) | (c.v10 ? 4u : 0u) |
                 (c.v11 ? 8u : 0u);
      const int64_t ry = c.y0 - win.y0, rx = c.x0 - win.x0;
      if (c.inside && ry >= 0 && ry + 1 < win.h && rx >= 0 && rx + 1 < win.w) {
        wi[k] = static_cast<int>(ry * win.w + rx);
      }
    }
  }

  for (int64_t cl = c_begin; cl < c_end; ++cl) {
    const int64_t channel = group * cpg + cl;
    const T* in_plane = input + (b * s.channels + channel) * hw;
    A* gi_plane = grad_input + (b * s.channels + channel) * hw;
    T* col = columns + (channel * KK) * width + column;
    // This channel's grad_columns, loaded before any store to columns.
    A gc[KK];
#pragma unroll
    for (int k = 0; k < KK; ++k) gc[k] = valid ? ToAcc()(col[k * width]) : A(0);
    __syncthreads();  // the previous channel's window is flushed
    for (int i = tid; i < cells; i += kTileThreads) {
      const int64_t y = win.y0 + i / win.w, x = win.x0 + i % win.w;
      patch[i] = (y >= 0 && y < s.height && x >= 0 && x < s.width)
                     ? ToAcc()(in_plane[y * s.width + x])
                     : A(0);
      gwin[i] = A(0);
    }
    __syncthreads();
    if (valid) {
#pragma unroll
      for (int k = 0; k < KK; ++k) {
        const unsigned f = flags[k];
        if (f == 0) {  // outside the map: the column is 0, no gradient
          col[k * width] = FromAcc<T>()(A(0));
          continue;
        }
        const bool b00 = f & 1u, b01 = f & 2u, b10 = f & 4u, b11 = f & 8u;
        A v00, v01, v10, v11;
        const int64_t gi = gidx[k];
        if (wi[k] >= 0) {  // cells outside the image hold 0 in the patch
          v00 = patch[wi[k]];
          v01 = patch[wi[k] + 1];
          v10 = patch[wi[k] + win.w];
          v11 = patch[wi[k] + win.w + 1];
        } else {
          v00 = b00 ? ToAcc()(in_plane[gi]) : A(0);
          v01 = b01 ? ToAcc()(in_plane[gi + 1]) : A(0);
          v10 = b10 ? ToAcc()(in_plane[gi + s.width]) : A(0);
          v11 = b11 ? ToAcc()(in_plane[gi + s.width + 1]) : A(0);
        }
        const A ly = lys[k], lx = lxs[k];
        const A hy = A(1) - ly, hx = A(1) - lx;
        const A w00 = hy * hx, w01 = hy * lx, w10 = ly * hx, w11 = ly * lx;
        const A m = ms[k];
        A v = A(0);  // im2col_sample's column value, same expression
        if (b00) v += (w00 * m) * v00;
        if (b01) v += (w01 * m) * v01;
        if (b10) v += (w10 * m) * v10;
        if (b11) v += (w11 * m) * v11;
        col[k * width] = FromAcc<T>()(v);
        gm[k] += gc[k] * (w00 * v00 + w01 * v01 + w10 * v10 + w11 * v11);
        const A g = gc[k] * m;
        gy[k] += g * (hx * (v10 - v00) + lx * (v11 - v01));
        gx[k] += g * (hy * (v01 - v00) + ly * (v11 - v10));
        if (wi[k] >= 0) {
          if (b00) atomicAdd(gwin + wi[k], g * w00);
          if (b01) atomicAdd(gwin + wi[k] + 1, g * w01);
          if (b10) atomicAdd(gwin + wi[k] + win.w, g * w10);
          if (b11) atomicAdd(gwin + wi[k] + win.w + 1, g * w11);
        } else {
          if (b00) atomicAdd(gi_plane + gi, g * w00);
          if (b01) atomicAdd(gi_plane + gi + 1, g * w01);
          if (b10) atomicAdd(gi_plane + gi + s.width, g * w10);
          if (b11) atomicAdd(gi_plane + gi + s.width + 1, g * w11);
        }
      }
    }
    __syncthreads();
    for (int i = tid; i < cells; i += kTileThreads) {
      const A gv = gwin[i];
      const int64_t y = win.y0 + i / win.w, x = win.x0 + i % win.w;
      if (gv != A(0) && y >= 0 && y < s.height && x >= 0 && x < s.width) {
        atomicAdd(gi_plane + y * s.width + x, gv);
      }
    }
  }
  if (!valid) return;
  const int64_t offset_numel = 2 * s.samples();
  A* go = grad_offset + chunk * offset_numel;
  A* gmask = grad_mask != nullptr ? grad_mask + chunk * s.samples() : nullptr;
#pragma unroll
  for (int k = 0; k < KK; ++k) {
    const int64_t bgk = (b * s.deform_groups + group) * KK + k;
    go[(bgk * 2) * plane + pixel] = gy[k];
    go[(bgk * 2 + 1) * plane + pixel] = gx[k];
    if (gmask != nullptr) gmask[bgk * plane + pixel] = gm[k];
  }
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

int64_t deform_conv_cuda_channel_slices(const DeformConvShape& s,
                                        bool double_precision) {
  const bool tiled = double_precision ? use_tiled<double>(s) : use_tiled<float>(s);
  return tiled ? tiled_grid(s).chunks : slices_for(s, kTargetThreads);
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
  if (use_tiled<A>(s)) {
    const TiledGrid grid = tiled_grid(s);
    if (slices != grid.chunks) return cudaErrorInvalidValue;  // caller's bug
    deform_conv_col2im_tiled_kernel<T, A>
        <<<static_cast<unsigned>(grid.blocks(s)), kTileThreads,
           tiled_shared_bytes<A>(s), stream>>>(input, offset, mask, columns, s,
                                               grad_input, grad_offset,
                                               grad_mask);
    return cudaGetLastError();
  }
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
