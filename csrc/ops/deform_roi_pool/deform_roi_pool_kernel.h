// Deformable RoI pooling math (mmcv semantics) shared by the CPU loops and the
// CUDA kernels. Torch-free: pointers and sizes only.
//
// Two types: S is the storage type of input / offset / output / gradients as
// the caller holds them (float, double, and on CUDA __half, __nv_bfloat16),
// T the type everything is computed in (float for the 16-bit types, else S).
// RoIs are always passed in T.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/macros.h"
#include "ops/_rois/rois_kernel.h"

namespace visdet_ops {
namespace deform_roi_pool_detail {

// Storage <-> compute conversion. Plain casts here; deform_roi_pool_cuda.cu
// specialises it for __half and __nv_bfloat16 with the explicit intrinsics
// (torch builds .cu files with the implicit half conversions switched off).
template <typename T, typename S>
struct ValueCast {
  static VISDET_HOST_DEVICE VISDET_INLINE T load(S v) {
    return static_cast<T>(v);
  }
  static VISDET_HOST_DEVICE VISDET_INLINE S store(T v) {
    return static_cast<S>(v);
  }
};

// Samples per bin side: sampling_ratio when positive (mmcv; at most
// int_bounds::kMaxSamplingRatio, checked on the host), else adaptive
// ceil(bin size), at most the map side + 1 (adaptive_grid). A negative or NaN
// size (reversed RoI, overflow) has none.
template <typename T>
VISDET_HOST_DEVICE VISDET_INLINE int grid_size(int64_t sampling_ratio,
                                               T bin_size, int64_t map_side) {
  if (sampling_ratio > 0) return static_cast<int>(sampling_ratio);
  return adaptive_grid(bin_size, map_side);
}

// One output bin (k, ph, pw) in feature-map coordinates: its top-left corner
// with the learned offset applied, the bin size and the sample grid.
template <typename T>
struct BinGeometry {
  int64_t batch;
  T y0, x0;          // top-left corner of the (shifted) bin
  T bin_h, bin_w;
  T roi_h, roi_w;    // unshifted RoI size: the offset is in units of it
  int grid_h, grid_w;
  T count;           // samples averaged (at least 1)
};

// mmcv's deform_roi_pool geometry: RoI corners at roi * spatial_scale - 0.5
// (the half-pixel shift of RoIAlign aligned=True, no minimum size), then the
// whole bin moves by gamma * (roi_w, roi_h) * offset[k, :, ph, pw]. The
// grid depends on the RoI only, never on the offset. offset may be null.
template <typename T, typename S, typename I>
VISDET_HOST_DEVICE VISDET_INLINE BinGeometry<T> bin_geometry(
    const T* roi, const S* offset, I k, I ph, I pw, I pooled_h, I pooled_w,
    T spatial_scale, int64_t sampling_ratio, T gamma, I height, I width) {
  BinGeometry<T> g;
  g.batch = static_cast<int64_t>(roi[0]);
  T start_w = roi[1] * spatial_scale - T(0.5);
  T start_h = roi[2] * spatial_scale - T(0.5);
  g.roi_w = (roi[3] * spatial_scale - T(0.5)) - start_w;
  g.roi_h = (roi[4] * spatial_scale - T(0.5)) - start_h;
  g.bin_h = g.roi_h / static_cast<T>(pooled_h);
  g.bin_w = g.roi_w / static_cast<T>(pooled_w);
  g.grid_h = grid_size(sampling_ratio, g.bin_h, static_cast<int64_t>(height));
  g.grid_w = grid_size(sampling_ratio, g.bin_w, static_cast<int64_t>(width));
  if (offset != nullptr) {
    const S* o = offset + (k * 2 * pooled_h + ph) * pooled_w + pw;
    start_w += gamma * g.roi_w * ValueCast<T, S>::load(o[0]);
    start_h += gamma * g.roi_h * ValueCast<T, S>::load(o[pooled_h * pooled_w]);
  }
  g.y0 = start_h + static_cast<T>(ph) * g.bin_h;
  g.x0 = start_w + static_cast<T>(pw) * g.bin_w;
  const T count = static_cast<T>(g.grid_h) * static_cast<T>(g.grid_w);
  g.count = count > T(1) ? count : T(1);
  return g;
}

// Bilinear interpolation at (y, x) on an h x w plane with mmcv's border
// rules: outside [-1, h] x [-1, w] the value is 0; inside, coordinates below
// 0 clamp to 0 and the last row/column extends to the border. *_moves says
// whether the value changes with that coordinate at this point (false where
// it is clamped), which makes the offset gradient the exact derivative of
// the forward also at the borders.
template <typename T, typename I>
struct Bilinear {
  I y_low, x_low, y_high, x_high;
  T ly, lx, hy, hx;
  bool y_moves, x_moves;
};

// I is the index type: int32_t when every offset fits (cheaper integer
// arithmetic on GPUs), int64_t otherwise.
template <typename T, typename I>
VISDET_HOST_DEVICE VISDET_INLINE bool bilinear_setup(I height, I width, T y,
                                                     T x, Bilinear<T, I>* b) {
  // Written as a negated range test so that NaN (a NaN offset) is rejected.
  if (!(y >= T(-1) && y <= static_cast<T>(height) && x >= T(-1) &&
        x <= static_cast<T>(width))) {
    return false;
  }
  b->y_moves = y > T(0);
  b->x_moves = x > T(0);
  if (y <= T(0)) y = T(0);
  if (x <= T(0)) x = T(0);
  b->y_low = static_cast<I>(y);
  b->x_low = static_cast<I>(x);
  if (b->y_low >= height - 1) {
    b->y_high = b->y_low = height - 1;
    y = static_cast<T>(b->y_low);
    b->y_moves = false;
  } else {
    b->y_high = b->y_low + 1;
  }
  if (b->x_low >= width - 1) {
    b->x_high = b->x_low = width - 1;
    x = static_cast<T>(b->x_low);
    b->x_moves = false;
  } else {
    b->x_high = b->x_low + 1;
  }
  b->ly = y - static_cast<T>(b->y_low);
  b->lx = x - static_cast<T>(b->x_low);
  b->hy = T(1) - b->ly;
  b->hx = T(1) - b->lx;
  return true;
}

// The four corner values of a sample.
template <typename T>
struct Corners {
  T ll, lh, hl, hh;  // (y_low, x_low), (y_low, x_high), (y_high, x_low), (y_high, x_high)
};

template <typename T, typename S, typename I>
VISDET_HOST_DEVICE VISDET_INLINE Corners<T> corners(const S* plane, I width,
                                                    const Bilinear<T, I>& b) {
  Corners<T> v;
  v.ll = ValueCast<T, S>::load(plane[b.y_low * width + b.x_low]);
  v.lh = ValueCast<T, S>::load(plane[b.y_low * width + b.x_high]);
  v.hl = ValueCast<T, S>::load(plane[b.y_high * width + b.x_low]);
  v.hh = ValueCast<T, S>::load(plane[b.y_high * width + b.x_high]);
  return v;
}

// Calls fn(b) for every sample of the bin that lies inside the map.
template <typename T, typename I, typename Fn>
VISDET_HOST_DEVICE VISDET_INLINE void for_each_sample(const BinGeometry<T>& g,
                                                      I height, I width,
                                                      Fn fn) {
  for (int iy = 0; iy < g.grid_h; ++iy) {
    const T y = g.y0 + (static_cast<T>(iy) + T(0.5)) * g.bin_h /
                           static_cast<T>(g.grid_h);
    for (int ix = 0; ix < g.grid_w; ++ix) {
      const T x = g.x0 + (static_cast<T>(ix) + T(0.5)) * g.bin_w /
                             static_cast<T>(g.grid_w);
      Bilinear<T, I> b;
      if (bilinear_setup(height, width, y, x, &b)) fn(b);
    }
  }
}

// Sizes every element function needs, in the index type.
template <typename I>
struct Dims {
  I channels, height, width, pooled_h, pooled_w;
  int64_t batch_size;  // for roi_flags
};

template <typename I, typename Shape>
VISDET_HOST_DEVICE VISDET_INLINE Dims<I> dims_of(const Shape& s) {
  return {static_cast<I>(s.channels), static_cast<I>(s.height),
          static_cast<I>(s.width),    static_cast<I>(s.pooled_h),
          static_cast<I>(s.pooled_w), s.batch_size};
}

// An invalid RoI (roi_flags != 0: non-finite, or batch index outside
// [0, batch_size)), which CUDA calls do not refuse unless sync checks are on
// (no device-to-host wait per call, so the op can be captured in a CUDA
// graph): NaN output, no input or offset gradient, and no input read. CPU
// calls never get here with one (the host check refuses it first).
template <typename T, typename I>
VISDET_HOST_DEVICE VISDET_INLINE bool invalid_roi(const T* rois, I k,
                                                  const Dims<I>& d) {
  return roi_flags(rois + k * 5, d.batch_size) != 0;
}

// One output element; index enumerates [K, C, PH, PW] in row-major order.
// The output is the mean of the bin's samples (0 for a bin without any).
template <typename S, typename T, typename I>
VISDET_HOST_DEVICE VISDET_INLINE void forward_element(
    I index, const S* input, const T* rois, const S* offset, Dims<I> d,
    T spatial_scale, int64_t sampling_ratio, T gamma, S* output) {
  const I pw = index % d.pooled_w;
  const I ph = (index / d.pooled_w) % d.pooled_h;
  const I c = (index / d.pooled_w / d.pooled_h) % d.channels;
  const I k = index / d.pooled_w / d.pooled_h / d.channels;
  if (invalid_roi(rois, k, d)) {
    output[index] = ValueCast<T, S>::store(quiet_nan<T>());
    return;
  }
  const BinGeometry<T> g =
      bin_geometry(rois + k * 5, offset, k, ph, pw, d.pooled_h, d.pooled_w,
                   spatial_scale, sampling_ratio, gamma, d.height, d.width);
  const S* plane =
      input + (static_cast<I>(g.batch) * d.channels + c) * d.height * d.width;
  T sum = T(0);
  for_each_sample(g, d.height, d.width, [&](const Bilinear<T, I>& b) {
    const Corners<T> v = corners(plane, d.width, b);
    sum += b.hy * b.hx * v.ll + b.hy * b.lx * v.lh + b.ly * b.hx * v.hl +
           b.ly * b.lx * v.hh;
  });
  output[index] = ValueCast<T, S>::store(sum / g.count);
}

// Input gradient of one output element: calls add(offset, value) for every
// input element it reads (an atomic add on CUDA, a plain add on the CPU).
template <typename S, typename T, typename I, typename AddFn>
VISDET_HOST_DEVICE VISDET_INLINE void backward_input_element(
    I index, const S* grad_output, const T* rois, const S* offset, Dims<I> d,
    T spatial_scale, int64_t sampling_ratio, T gamma, AddFn add) {
  const I pw = index % d.pooled_w;
  const I ph = (index / d.pooled_w) % d.pooled_h;
  const I c = (index / d.pooled_w / d.pooled_h) % d.channels;
  const I k = index / d.pooled_w / d.pooled_h / d.channels;
  if (invalid_roi(rois, k, d)) return;
  const BinGeometry<T> g =
      bin_geometry(rois + k * 5, offset, k, ph, pw, d.pooled_h, d.pooled_w,
                   spatial_scale, sampling_ratio, gamma, d.height, d.width);
  const T share = ValueCast<T, S>::load(grad_output[index]) / g.count;
  const I plane = (static_cast<I>(g.batch) * d.channels + c) * d.height * d.width;
  for_each_sample(g, d.height, d.width, [&](const Bilinear<T, I>& b) {
    add(plane + b.y_low * d.width + b.x_low, share * b.hy * b.hx);
    add(plane + b.y_low * d.width + b.x_high, share * b.hy * b.lx);
    add(plane + b.y_high * d.width + b.x_low, share * b.ly * b.hx);
    add(plane + b.y_high * d.width + b.x_high, share * b.ly * b.lx);
  });
}

// Offset gradient of one bin, summed over channels c_begin, c_begin + c_step,
// ... (one thread sums them all on the CPU; on CUDA a few lanes share the
// channels and add their partial sums in a fixed order). The caller scales
// the reduced sums by `scale_x` / `scale_y`: d offset / d x of the sample
// positions over the sample count.
template <typename T>
struct OffsetGrad {
  T dx, dy;
  T scale_x, scale_y;
};

template <typename S, typename T, typename I>
VISDET_HOST_DEVICE VISDET_INLINE OffsetGrad<T> backward_offset_partial(
    I bin, I c_begin, I c_step, const S* grad_output, const S* input,
    const T* rois, const S* offset, Dims<I> d, T spatial_scale,
    int64_t sampling_ratio, T gamma) {
  const I pw = bin % d.pooled_w;
  const I ph = (bin / d.pooled_w) % d.pooled_h;
  const I k = bin / d.pooled_w / d.pooled_h;
  OffsetGrad<T> r;
  r.dx = T(0);
  r.dy = T(0);
  if (invalid_roi(rois, k, d)) {  // no gradient: 0 * 0, never 0 * NaN
    r.scale_x = T(0);
    r.scale_y = T(0);
    return r;
  }
  const BinGeometry<T> g =
      bin_geometry(rois + k * 5, offset, k, ph, pw, d.pooled_h, d.pooled_w,
                   spatial_scale, sampling_ratio, gamma, d.height, d.width);
  r.scale_x = gamma * g.roi_w / g.count;
  r.scale_y = gamma * g.roi_h / g.count;
  const I bin_stride = d.pooled_h * d.pooled_w;
  const I plane_size = d.height * d.width;
  for (I c = c_begin; c < d.channels; c += c_step) {
    const T grad = ValueCast<T, S>::load(
        grad_output[(k * d.channels + c) * bin_stride + ph * d.pooled_w + pw]);
    const S* plane =
        input + (static_cast<I>(g.batch) * d.channels + c) * plane_size;
    for_each_sample(g, d.height, d.width, [&](const Bilinear<T, I>& b) {
      const Corners<T> v = corners(plane, d.width, b);
      // d value / dy and d value / dx of the bilinear form; 0 along a
      // coordinate that is clamped at this sample.
      if (b.y_moves) r.dy += grad * (b.hx * (v.hl - v.ll) + b.lx * (v.hh - v.lh));
      if (b.x_moves) r.dx += grad * (b.hy * (v.lh - v.ll) + b.ly * (v.hh - v.hl));
    });
  }
  return r;
}

}  // namespace deform_roi_pool_detail
}  // namespace visdet_ops
