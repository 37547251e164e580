// RoIAlign math (mmcv semantics) shared by the CPU loops and CUDA kernels.
// Torch-free: pointers and sizes only.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/macros.h"
#include "ops/_rois/rois_kernel.h"
#include "common/scalar.h"

namespace visdet_ops {
namespace roi_align_detail {

enum PoolMode : int { kMax = 0, kAvg = 1 };

// Geometry of one RoI, in feature-map coordinates. A is the compute type
// (acc_t of the storage type: float for float16/bfloat16 storage).
template <typename A>
struct RoIGeometry {
  int64_t batch;
  A start_h, start_w;
  A bin_h, bin_w;
  int grid_h, grid_w;
};

// `aligned` shifts by half a pixel (pixel centres at +0.5); without it a RoI
// is at least 1x1 (the legacy Detectron behaviour). sampling_ratio <= 0 means
// adaptive: ceil(roi_size / pooled_size) samples per bin, at most the map
// side + 1 (adaptive_grid). The RoI must be valid (roi_flags == 0).
template <typename T>
VISDET_HOST_DEVICE VISDET_INLINE RoIGeometry<acc_t<T>> roi_geometry(
    const T* roi, acc_t<T> spatial_scale, int64_t pooled_h, int64_t pooled_w,
    int64_t sampling_ratio, bool aligned, int64_t height, int64_t width) {
  using A = acc_t<T>;
  RoIGeometry<A> g;
  g.batch = static_cast<int64_t>(to_acc(roi[0]));
  const A offset = aligned ? A(0.5) : A(0);
  g.start_w = to_acc(roi[1]) * spatial_scale - offset;
  g.start_h = to_acc(roi[2]) * spatial_scale - offset;
  const A end_w = to_acc(roi[3]) * spatial_scale - offset;
  const A end_h = to_acc(roi[4]) * spatial_scale - offset;
  A roi_w = end_w - g.start_w;
  A roi_h = end_h - g.start_h;
  if (!aligned) {
    roi_w = max_of(roi_w, A(1));
    roi_h = max_of(roi_h, A(1));
  }
  g.bin_h = roi_h / static_cast<A>(pooled_h);
  g.bin_w = roi_w / static_cast<A>(pooled_w);
  // sampling_ratio is at most int_bounds::kMaxSamplingRatio (host check). A
  // negative-size RoI (x2 < x1 with aligned) has no samples.
  g.grid_h = sampling_ratio > 0
                 ? static_cast<int>(sampling_ratio)
                 : adaptive_grid(roi_h / static_cast<A>(pooled_h), height);
  g.grid_w = sampling_ratio > 0
                 ? static_cast<int>(sampling_ratio)
                 : adaptive_grid(roi_w / static_cast<A>(pooled_w), width);
  return g;
}

// Coordinate of sample i (of `grid` per bin) in bin `bin_index` along one
// axis: samples sit at the centres of a grid x grid split of the bin.
template <typename A, typename I>
VISDET_HOST_DEVICE VISDET_INLINE A sample_coord(A start, I bin_index, A bin,
                                                int i, int grid) {
  return start + static_cast<A>(bin_index) * bin +
         (static_cast<A>(i) + A(0.5)) * bin / static_cast<A>(grid);
}

// One axis of a bilinear sample: the two neighbouring indices and their
// weights (l for `high`, h = 1 - l for `low`). Returns false when the
// coordinate lies outside [-1, size] (the sample's value is 0). Separable:
// the CPU loops compute each axis once per RoI and reuse it for every channel.
template <typename A, typename I>
struct AxisWeights {
  I low, high;
  A l, h;
};

template <typename A, typename I>
VISDET_HOST_DEVICE VISDET_INLINE bool bilinear_axis(I size, A v,
                                                    AxisWeights<A, I>* a) {
  // Written as a negated range test so that NaN is rejected too.
  if (!(v >= A(-1) && v <= static_cast<A>(size))) return false;
  if (v <= A(0)) v = A(0);
  a->low = static_cast<I>(v);
  if (a->low >= size - 1) {
    a->high = a->low = size - 1;
    v = static_cast<A>(a->low);
  } else {
    a->high = a->low + 1;
  }
  a->l = v - static_cast<A>(a->low);
  a->h = A(1) - a->l;
  return true;
}

// Bilinear weights and corner indices of the sample (y, x) on an h x w map.
// Returns false when the sample lies outside [-1, h] x [-1, w] (value 0).
// I is the index type: int32_t when every offset fits (much cheaper integer
// division on GPUs), int64_t otherwise.
template <typename A, typename I>
struct Bilinear {
  I y_low, x_low, y_high, x_high;
  A w1, w2, w3, w4;
};

// The four weights of the axes (ay, ax): w1..w4 for the corners (low, low),
// (low, high), (high, low), (high, high) as (y, x).
template <typename A, typename I>
VISDET_HOST_DEVICE VISDET_INLINE Bilinear<A, I> bilinear_corners(
    const AxisWeights<A, I>& ay, const AxisWeights<A, I>& ax) {
  Bilinear<A, I> b;
  b.y_low = ay.low;
  b.y_high = ay.high;
  b.x_low = ax.low;
  b.x_high = ax.high;
  b.w1 = ay.h * ax.h;
  b.w2 = ay.h * ax.l;
  b.w3 = ay.l * ax.h;
  b.w4 = ay.l * ax.l;
  return b;
}

template <typename A, typename I>
VISDET_HOST_DEVICE VISDET_INLINE bool bilinear_weights(I height, I width, A y,
                                                       A x, Bilinear<A, I>* b) {
  AxisWeights<A, I> ay, ax;
  if (!bilinear_axis(height, y, &ay) || !bilinear_axis(width, x, &ax)) {
    return false;
  }
  *b = bilinear_corners(ay, ax);
  return true;
}

template <typename T, typename A, typename I>
VISDET_HOST_DEVICE VISDET_INLINE A bilinear_value(const T* plane, I width,
                                                  const Bilinear<A, I>& b) {
  return b.w1 * to_acc(plane[b.y_low * width + b.x_low]) +
         b.w2 * to_acc(plane[b.y_low * width + b.x_high]) +
         b.w3 * to_acc(plane[b.y_high * width + b.x_low]) +
         b.w4 * to_acc(plane[b.y_high * width + b.x_high]);
}

// One output element: index enumerates [K, C, PH, PW] in row-major order.
// In max mode the chosen sample's coordinates go to argmax_y/argmax_x (in the
// compute type, so a float16 run keeps exact sample positions; -1 when the
// bin has no sample); the output of an empty bin is 0. An invalid RoI
// (roi_flags != 0: non-finite, or batch index outside [0, batch_size)) gives
// NaN and argmax -1, and reads no input.
// roi_align_forward_at: the element (k, c, ph, pw), at offset index of the
// output (a caller may walk the elements in any order);
// roi_align_forward_element: the element at offset index, row-major.
template <typename T, typename I>
VISDET_HOST_DEVICE VISDET_INLINE void roi_align_forward_at(
    I index, I k, I c, I ph, I pw, const T* input, const acc_t<T>* rois,
    int64_t batch_size, I channels, I height, I width, I pooled_h, I pooled_w,
    acc_t<T> spatial_scale, int64_t sampling_ratio, int pool_mode, bool aligned,
    T* output, acc_t<T>* argmax_y, acc_t<T>* argmax_x) {
  using A = acc_t<T>;
  const acc_t<T>* roi = rois + k * 5;
  if (roi_flags(roi, batch_size) != 0) {
    output[index] = from_acc<T>(quiet_nan<A>());
    if (pool_mode == kMax) {
      argmax_y[index] = A(-1);
      argmax_x[index] = A(-1);
    }
    return;
  }
  const RoIGeometry<A> g = roi_geometry(roi, spatial_scale, pooled_h, pooled_w,
                                        sampling_ratio, aligned, height, width);
  const T* plane =
      input + (static_cast<I>(g.batch) * channels + c) * height * width;

  if (pool_mode == kMax) {
    A best = lowest_value<A>();
    A best_y = A(-1), best_x = A(-1);
    for (int iy = 0; iy < g.grid_h; ++iy) {
      const A y = sample_coord(g.start_h, ph, g.bin_h, iy, g.grid_h);
      for (int ix = 0; ix < g.grid_w; ++ix) {
        const A x = sample_coord(g.start_w, pw, g.bin_w, ix, g.grid_w);
        Bilinear<A, I> b;
        const A val = bilinear_weights(height, width, y, x, &b)
                          ? bilinear_value(plane, width, b)
                          : A(0);
        if (val > best) {
          best = val;
          best_y = y;
          best_x = x;
        }
      }
    }
    const bool empty = g.grid_h == 0 || g.grid_w == 0;
    output[index] = from_acc<T>(empty ? A(0) : best);
    argmax_y[index] = best_y;
    argmax_x[index] = best_x;
  } else {
    A sum = A(0);
    for (int iy = 0; iy < g.grid_h; ++iy) {
      const A y = sample_coord(g.start_h, ph, g.bin_h, iy, g.grid_h);
      for (int ix = 0; ix < g.grid_w; ++ix) {
        const A x = sample_coord(g.start_w, pw, g.bin_w, ix, g.grid_w);
        Bilinear<A, I> b;
        if (bilinear_weights(height, width, y, x, &b)) {
          sum += bilinear_value(plane, width, b);
        }
      }
    }
    const int count = max_of(g.grid_h * g.grid_w, 1);
    output[index] = from_acc<T>(sum / static_cast<A>(count));
  }
}

template <typename T, typename I>
VISDET_HOST_DEVICE VISDET_INLINE void roi_align_forward_element(
    I index, const T* input, const acc_t<T>* rois, int64_t batch_size, I channels,
    I height, I width, I pooled_h, I pooled_w, acc_t<T> spatial_scale,
    int64_t sampling_ratio, int pool_mode, bool aligned, T* output,
    acc_t<T>* argmax_y, acc_t<T>* argmax_x) {
  const PooledElement<I> e =
      row_major_element<I>(index, channels, pooled_h, pooled_w);
  roi_align_forward_at<T, I>(index, e.k, e.c, e.ph, e.pw, input, rois, batch_size,
                             channels, height, width, pooled_h, pooled_w,
                             spatial_scale, sampling_ratio, pool_mode, aligned,
                             output, argmax_y, argmax_x);
}

// Backward of one output bin (ph, pw) of a valid RoI with geometry g, whose
// output gradient is `grad`: calls add(y, x, value) (value in the compute
// type A) for each pixel (y, x) of the RoI's (batch, channel) plane it
// contributes to. The caller adds into that plane: plainly on the CPU, with
// atomics on CUDA (into a shared-memory tile of the RoI's footprint or into
// global memory). In max mode (y, x) is the sample the forward recorded
// (argmax, -1 for an empty bin); avg mode shares grad among the bin's samples.
template <typename A, typename I, typename AddFn>
VISDET_HOST_DEVICE VISDET_INLINE void scatter_sample(I height, I width, A y,
                                                     A x, A value, AddFn add) {
  Bilinear<A, I> b;
  if (!bilinear_weights(height, width, y, x, &b)) return;
  add(b.y_low, b.x_low, value * b.w1);
  add(b.y_low, b.x_high, value * b.w2);
  add(b.y_high, b.x_low, value * b.w3);
  add(b.y_high, b.x_high, value * b.w4);
}

template <typename A, typename I, typename AddFn>
VISDET_HOST_DEVICE VISDET_INLINE void roi_align_backward_max_bin(
    I height, I width, A argmax_y, A argmax_x, A grad, AddFn add) {
  if (argmax_y != A(-1)) scatter_sample(height, width, argmax_y, argmax_x,
                                        grad, add);
}

template <typename A, typename I, typename AddFn>
VISDET_HOST_DEVICE VISDET_INLINE void roi_align_backward_avg_bin(
    const RoIGeometry<A>& g, I height, I width, I ph, I pw, A grad,
    AddFn add) {
  const int count = max_of(g.grid_h * g.grid_w, 1);
  const A share = grad / static_cast<A>(count);
  for (int iy = 0; iy < g.grid_h; ++iy) {
    const A y = sample_coord(g.start_h, ph, g.bin_h, iy, g.grid_h);
    for (int ix = 0; ix < g.grid_w; ++ix) {
      const A x = sample_coord(g.start_w, pw, g.bin_w, ix, g.grid_w);
      scatter_sample(height, width, y, x, share, add);
    }
  }
}

// The pixels [lo, hi] of one axis of `size` that bilinear samples with
// coordinates in [first, last] can touch (bilinear_axis's clamping is
// monotonic, so the ends bound every sample between them). False when the
// range is empty or not a number.
template <typename A>
VISDET_HOST_DEVICE VISDET_INLINE bool axis_footprint(A first, A last,
                                                     int64_t size, int64_t* lo,
                                                     int64_t* hi) {
  if (!(first <= last) || size <= 0) return false;
  const A top = static_cast<A>(size - 1);
  const A f = first < A(0) ? A(0) : (first > top ? top : first);
  const A l = last < A(0) ? A(0) : (last > top ? top : last);
  *lo = static_cast<int64_t>(f);
  *hi = min_of(static_cast<int64_t>(l) + 1, size - 1);
  return true;
}

}  // namespace roi_align_detail
}  // namespace visdet_ops
