// RoIAlign math (mmcv semantics) shared by the CPU loops and CUDA kernels.
// Torch-free: pointers and sizes only.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/macros.h"

namespace visdet_ops {
namespace roi_align_detail {

enum PoolMode : int { kMax = 0, kAvg = 1 };

// Geometry of one RoI, in feature-map coordinates.
template <typename T>
struct RoIGeometry {
  int64_t batch;
  T start_h, start_w;
  T bin_h, bin_w;
  int grid_h, grid_w;
};

// `aligned` shifts by half a pixel (pixel centres at +0.5); without it a RoI
// is at least 1x1 (the legacy Detectron behaviour). sampling_ratio <= 0 means
// adaptive: ceil(roi_size / pooled_size) samples per bin.
template <typename T>
VISDET_HOST_DEVICE VISDET_INLINE RoIGeometry<T> roi_geometry(
    const T* roi, T spatial_scale, int64_t pooled_h, int64_t pooled_w,
    int64_t sampling_ratio, bool aligned) {
  RoIGeometry<T> g;
  g.batch = static_cast<int64_t>(roi[0]);
  const T offset = aligned ? T(0.5) : T(0);
  g.start_w = roi[1] * spatial_scale - offset;
  g.start_h = roi[2] * spatial_scale - offset;
  const T end_w = roi[3] * spatial_scale - offset;
  const T end_h = roi[4] * spatial_scale - offset;
  T roi_w = end_w - g.start_w;
  T roi_h = end_h - g.start_h;
  if (!aligned) {
    roi_w = max_of(roi_w, T(1));
    roi_h = max_of(roi_h, T(1));
  }
  g.bin_h = roi_h / static_cast<T>(pooled_h);
  g.bin_w = roi_w / static_cast<T>(pooled_w);
  g.grid_h = sampling_ratio > 0
                 ? static_cast<int>(sampling_ratio)
                 : static_cast<int>(ceil(roi_h / static_cast<T>(pooled_h)));
  g.grid_w = sampling_ratio > 0
                 ? static_cast<int>(sampling_ratio)
                 : static_cast<int>(ceil(roi_w / static_cast<T>(pooled_w)));
  // A negative-size RoI (x2 < x1 with aligned) has no samples.
  if (g.grid_h < 0) g.grid_h = 0;
  if (g.grid_w < 0) g.grid_w = 0;
  return g;
}

// Coordinate of sample i (of `grid` per bin) in bin `bin_index` along one
// axis: samples sit at the centres of a grid x grid split of the bin.
template <typename T, typename I>
VISDET_HOST_DEVICE VISDET_INLINE T sample_coord(T start, I bin_index, T bin,
                                                int i, int grid) {
  return start + static_cast<T>(bin_index) * bin +
         (static_cast<T>(i) + T(0.5)) * bin / static_cast<T>(grid);
}

// Bilinear weights and corner indices of the sample (y, x) on an h x w map.
// Returns false when the sample lies outside [-1, h] x [-1, w] (value 0).
// I is the index type: int32_t when every offset fits (much cheaper integer
// division on GPUs), int64_t otherwise.
template <typename T, typename I>
struct Bilinear {
  I y_low, x_low, y_high, x_high;
  T w1, w2, w3, w4;
};

template <typename T, typename I>
VISDET_HOST_DEVICE VISDET_INLINE bool bilinear_weights(I height, I width, T y,
                                                       T x, Bilinear<T, I>* b) {
  // Written as a negated range test so that NaN is rejected too.
  if (!(y >= T(-1) && y <= static_cast<T>(height) && x >= T(-1) &&
        x <= static_cast<T>(width))) {
    return false;
  }
  if (y <= T(0)) y = T(0);
  if (x <= T(0)) x = T(0);
  b->y_low = static_cast<I>(y);
  b->x_low = static_cast<I>(x);
  if (b->y_low >= height - 1) {
    b->y_high = b->y_low = height - 1;
    y = static_cast<T>(b->y_low);
  } else {
    b->y_high = b->y_low + 1;
  }
  if (b->x_low >= width - 1) {
    b->x_high = b->x_low = width - 1;
    x = static_cast<T>(b->x_low);
  } else {
    b->x_high = b->x_low + 1;
  }
  const T ly = y - static_cast<T>(b->y_low);
  const T lx = x - static_cast<T>(b->x_low);
  const T hy = T(1) - ly;
  const T hx = T(1) - lx;
  b->w1 = hy * hx;
  b->w2 = hy * lx;
  b->w3 = ly * hx;
  b->w4 = ly * lx;
  return true;
}

template <typename T, typename I>
VISDET_HOST_DEVICE VISDET_INLINE T bilinear_value(const T* plane, I width,
                                                  const Bilinear<T, I>& b) {
  return b.w1 * plane[b.y_low * width + b.x_low] +
         b.w2 * plane[b.y_low * width + b.x_high] +
         b.w3 * plane[b.y_high * width + b.x_low] +
         b.w4 * plane[b.y_high * width + b.x_high];
}

// One output element: index enumerates [K, C, PH, PW] in row-major order.
// In max mode the chosen sample's coordinates go to argmax_y/argmax_x
// (-1 when the bin has no sample); the output of an empty bin is 0.
template <typename T, typename I>
VISDET_HOST_DEVICE VISDET_INLINE void roi_align_forward_element(
    I index, const T* input, const T* rois, I channels, I height, I width,
    I pooled_h, I pooled_w, T spatial_scale, int64_t sampling_ratio,
    int pool_mode, bool aligned, T* output, T* argmax_y, T* argmax_x) {
  const I pw = index % pooled_w;
  const I ph = (index / pooled_w) % pooled_h;
  const I c = (index / pooled_w / pooled_h) % channels;
  const I k = index / pooled_w / pooled_h / channels;

  const RoIGeometry<T> g = roi_geometry(rois + k * 5, spatial_scale, pooled_h,
                                        pooled_w, sampling_ratio, aligned);
  const T* plane =
      input + (static_cast<I>(g.batch) * channels + c) * height * width;

  if (pool_mode == kMax) {
    T best = lowest_value<T>();
    T best_y = T(-1), best_x = T(-1);
    for (int iy = 0; iy < g.grid_h; ++iy) {
      const T y = sample_coord(g.start_h, ph, g.bin_h, iy, g.grid_h);
      for (int ix = 0; ix < g.grid_w; ++ix) {
        const T x = sample_coord(g.start_w, pw, g.bin_w, ix, g.grid_w);
        Bilinear<T, I> b;
        const T val = bilinear_weights(height, width, y, x, &b)
                          ? bilinear_value(plane, width, b)
                          : T(0);
        if (val > best) {
          best = val;
          best_y = y;
          best_x = x;
        }
      }
    }
    const bool empty = g.grid_h == 0 || g.grid_w == 0;
    output[index] = empty ? T(0) : best;
    argmax_y[index] = best_y;
    argmax_x[index] = best_x;
  } else {
    T sum = T(0);
    for (int iy = 0; iy < g.grid_h; ++iy) {
      const T y = sample_coord(g.start_h, ph, g.bin_h, iy, g.grid_h);
      for (int ix = 0; ix < g.grid_w; ++ix) {
        const T x = sample_coord(g.start_w, pw, g.bin_w, ix, g.grid_w);
        Bilinear<T, I> b;
        if (bilinear_weights(height, width, y, x, &b)) {
          sum += bilinear_value(plane, width, b);
        }
      }
    }
    const int count = max_of(g.grid_h * g.grid_w, 1);
    output[index] = sum / static_cast<T>(count);
  }
}

// Backward of one output element: calls add(offset, value) for each input
// element it contributes to (an atomic add on CUDA, a plain add on the CPU).
template <typename T, typename I, typename AddFn>
VISDET_HOST_DEVICE VISDET_INLINE void roi_align_backward_element(
    I index, const T* grad_output, const T* rois, const T* argmax_y,
    const T* argmax_x, I channels, I height, I width, I pooled_h, I pooled_w,
    T spatial_scale, int64_t sampling_ratio, int pool_mode, bool aligned,
    AddFn add) {
  const I pw = index % pooled_w;
  const I ph = (index / pooled_w) % pooled_h;
  const I c = (index / pooled_w / pooled_h) % channels;
  const I k = index / pooled_w / pooled_h / channels;

  const T grad = grad_output[index];
  const T* roi = rois + k * 5;
  const I batch = static_cast<I>(roi[0]);
  const I plane_offset = (batch * channels + c) * height * width;

  auto scatter = [&](T y, T x, T g) {
    Bilinear<T, I> b;
    if (!bilinear_weights(height, width, y, x, &b)) return;
    add(plane_offset + b.y_low * width + b.x_low, g * b.w1);
    add(plane_offset + b.y_low * width + b.x_high, g * b.w2);
    add(plane_offset + b.y_high * width + b.x_low, g * b.w3);
    add(plane_offset + b.y_high * width + b.x_high, g * b.w4);
  };

  if (pool_mode == kMax) {
    const T y = argmax_y[index];
    const T x = argmax_x[index];
    if (y != T(-1)) scatter(y, x, grad);
    return;
  }
  const RoIGeometry<T> g = roi_geometry(roi, spatial_scale, pooled_h, pooled_w,
                                        sampling_ratio, aligned);
  const int count = max_of(g.grid_h * g.grid_w, 1);
  const T share = grad / static_cast<T>(count);
  for (int iy = 0; iy < g.grid_h; ++iy) {
    const T y = sample_coord(g.start_h, ph, g.bin_h, iy, g.grid_h);
    for (int ix = 0; ix < g.grid_w; ++ix) {
      const T x = sample_coord(g.start_w, pw, g.bin_w, ix, g.grid_w);
      scatter(y, x, share);
    }
  }
}

}  // namespace roi_align_detail
}  // namespace visdet_ops
