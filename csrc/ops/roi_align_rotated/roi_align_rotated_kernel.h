// RoIAlignRotated math (mmcv semantics) shared by the CPU loops and the CUDA
// kernels. Torch-free: pointers and sizes only.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/macros.h"
#include "common/scalar.h"
#include "ops/_rois/rois_kernel.h"

namespace visdet_ops {
namespace roi_align_rotated_detail {

// Geometry of one rotated RoI (batch_index, x, y, w, h, angle), in
// feature-map coordinates. A is the compute type (acc_t of the storage type:
// float for float16/bfloat16 storage).
template <typename A>
struct RotatedGeometry {
  int64_t batch;
  A center_h, center_w;  // the RoI's centre (shifted by -0.5 with aligned)
  A start_h, start_w;    // -h / 2, -w / 2: the grid's corner in the RoI frame
  A bin_h, bin_w;
  A cos_t, sin_t;  // of the counter-clockwise angle (negated with clockwise)
  int grid_h, grid_w;
};

// Largest map side adaptive sampling is bounded by, for a map of
// height x width: a bin of a RoI that lies in the sampled region
// [-1, height] x [-1, width] is at most its diagonal long, which is at most
// height + width + 2 (adaptive_grid caps the samples per side at this + 1).
VISDET_HOST_DEVICE VISDET_INLINE int64_t adaptive_side(int64_t height,
                                                       int64_t width) {
  return height + width + 1;
}

// `aligned` shifts the centre by half a pixel and keeps the RoI's size as it
// is (a negative size mirrors the grid, a zero size samples the centre);
// without it w and h are at least 1 (the legacy behaviour). sampling_ratio
// <= 0 means adaptive: ceil(roi_size / pooled_size) samples per bin side
// (none for a non-positive size), at most adaptive_side + 1 (adaptive_grid,
// ops/_rois/rois_kernel.h). The RoI must be valid (roi_flags == 0).
template <typename T>
VISDET_HOST_DEVICE VISDET_INLINE RotatedGeometry<acc_t<T>> rotated_geometry(
    const T* roi, acc_t<T> spatial_scale, int64_t pooled_h, int64_t pooled_w,
    int64_t sampling_ratio, bool aligned, bool clockwise, int64_t height,
    int64_t width) {
  using A = acc_t<T>;
  RotatedGeometry<A> g;
  g.batch = static_cast<int64_t>(to_acc(roi[0]));
  const A offset = aligned ? A(0.5) : A(0);
  g.center_w = to_acc(roi[1]) * spatial_scale - offset;
  g.center_h = to_acc(roi[2]) * spatial_scale - offset;
  A roi_w = to_acc(roi[3]) * spatial_scale;
  A roi_h = to_acc(roi[4]) * spatial_scale;
  A theta = to_acc(roi[5]);
  if (clockwise) theta = -theta;
  if (!aligned) {
    roi_w = max_of(roi_w, A(1));
    roi_h = max_of(roi_h, A(1));
  }
  g.bin_h = roi_h / static_cast<A>(pooled_h);
  g.bin_w = roi_w / static_cast<A>(pooled_w);
  const int64_t side = adaptive_side(height, width);
  // sampling_ratio is at most int_bounds::kMaxSamplingRatio (host check).
  g.grid_h = sampling_ratio > 0 ? static_cast<int>(sampling_ratio)
                                : adaptive_grid(g.bin_h, side);
  g.grid_w = sampling_ratio > 0 ? static_cast<int>(sampling_ratio)
                                : adaptive_grid(g.bin_w, side);
  g.start_h = -roi_h / A(2);
  g.start_w = -roi_w / A(2);
#if defined(__CUDA_ARCH__)
  g.cos_t = cos(theta);
  g.sin_t = sin(theta);
#else
  g.cos_t = std::cos(theta);
  g.sin_t = std::sin(theta);
#endif
  return g;
}

// Sample (iy, ix) of bin (ph, pw): the centres of a grid_h x grid_w split of
// the bin in the RoI's frame, rotated by the angle about the RoI's centre.
template <typename A>
VISDET_HOST_DEVICE VISDET_INLINE void sample_point(const RotatedGeometry<A>& g,
                                                   int64_t ph, int64_t pw,
                                                   int iy, int ix, A* y, A* x) {
  const A yy = g.start_h + static_cast<A>(ph) * g.bin_h +
               (static_cast<A>(iy) + A(0.5)) * g.bin_h /
                   static_cast<A>(g.grid_h);
  const A xx = g.start_w + static_cast<A>(pw) * g.bin_w +
               (static_cast<A>(ix) + A(0.5)) * g.bin_w /
                   static_cast<A>(g.grid_w);
  *y = yy * g.cos_t - xx * g.sin_t + g.center_h;
  *x = yy * g.sin_t + xx * g.cos_t + g.center_w;
}

// A bilinear sample on an h x w map: the corner pixels and their weights
// (w1..w4 for (low, low), (low, high), (high, low), (high, high) as (y, x)).
// y_low == -1 marks a sample outside the map (value 0, no gradient). I is the
// index type: int32_t when every offset fits, int64_t otherwise. 16-byte
// aligned: a CUDA block keeps a RoI's samples in shared memory.
template <typename A, typename I>
struct alignas(16) Sample {
  I y_low, x_low, y_high, x_high;
  A w1, w2, w3, w4;
  VISDET_HOST_DEVICE bool valid() const { return y_low >= 0; }
};

// mmcv's rule: a sample outside [-1, height] x [-1, width] is 0; inside, a
// coordinate below 0 clamps to 0 and the last row / column extends to the
// border. Written as a negated range test so that NaN is outside too.
template <typename A, typename I>
VISDET_HOST_DEVICE VISDET_INLINE Sample<A, I> bilinear_sample(I height,
                                                              I width, A y,
                                                              A x) {
  Sample<A, I> s;
  if (!(y >= A(-1) && y <= static_cast<A>(height) && x >= A(-1) &&
        x <= static_cast<A>(width))) {
    s.y_low = s.x_low = s.y_high = s.x_high = I(-1);
    s.w1 = s.w2 = s.w3 = s.w4 = A(0);
    return s;
  }
  if (y <= A(0)) y = A(0);
  if (x <= A(0)) x = A(0);
  s.y_low = static_cast<I>(y);
  s.x_low = static_cast<I>(x);
  if (s.y_low >= height - 1) {
    s.y_high = s.y_low = height - 1;
    y = static_cast<A>(s.y_low);
  } else {
    s.y_high = s.y_low + 1;
  }
  if (s.x_low >= width - 1) {
    s.x_high = s.x_low = width - 1;
    x = static_cast<A>(s.x_low);
  } else {
    s.x_high = s.x_low + 1;
  }
  const A ly = y - static_cast<A>(s.y_low), lx = x - static_cast<A>(s.x_low);
  const A hy = A(1) - ly, hx = A(1) - lx;
  s.w1 = hy * hx;
  s.w2 = hy * lx;
  s.w3 = ly * hx;
  s.w4 = ly * lx;
  return s;
}

// Sample j (of grid_h * grid_w, row-major in (iy, ix)) of bin b (row-major in
// (ph, pw)) of a RoI, for a map of height x width.
template <typename A, typename I>
VISDET_HOST_DEVICE VISDET_INLINE Sample<A, I> rotated_sample(
    const RotatedGeometry<A>& g, I pooled_w, I height, I width, I b, int j) {
  const I ph = b / pooled_w, pw = b - (b / pooled_w) * pooled_w;
  A y, x;
  sample_point(g, static_cast<int64_t>(ph), static_cast<int64_t>(pw),
               j / g.grid_w, j % g.grid_w, &y, &x);
  return bilinear_sample<A, I>(height, width, y, x);
}

// The value of a valid sample on one (batch, channel) plane.
template <typename T, typename A, typename I>
VISDET_HOST_DEVICE VISDET_INLINE A sample_value(const T* plane, I width,
                                                const Sample<A, I>& s) {
  return s.w1 * to_acc(plane[s.y_low * width + s.x_low]) +
         s.w2 * to_acc(plane[s.y_low * width + s.x_high]) +
         s.w3 * to_acc(plane[s.y_high * width + s.x_low]) +
         s.w4 * to_acc(plane[s.y_high * width + s.x_high]);
}

// Calls add(y, x, value) for the four corners of a valid sample, value being
// `share` times the corner's weight. The caller adds into the RoI's
// (batch, channel) plane: plainly on the CPU, with atomics on CUDA.
template <typename A, typename I, typename AddFn>
VISDET_HOST_DEVICE VISDET_INLINE void scatter_sample(const Sample<A, I>& s,
                                                     A share, AddFn add) {
  add(s.y_low, s.x_low, share * s.w1);
  add(s.y_low, s.x_high, share * s.w2);
  add(s.y_high, s.x_low, share * s.w3);
  add(s.y_high, s.x_high, share * s.w4);
}

// The pixels [lo, hi] of one axis of `size` that bilinear samples with
// coordinates in [first, last] can touch (the clamping is monotonic, so the
// ends bound every sample between them). False when the range is empty or
// not a number. A sample that rounding puts outside still adds correctly:
// the CUDA backward adds it to global memory directly.
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

// The axis-aligned box of every sample of a RoI: the samples lie in the
// parallelogram of the grid's four corner samples (rotation is linear), so
// their extremes bound all of them. False when the grid is empty.
template <typename A>
VISDET_HOST_DEVICE VISDET_INLINE bool sample_box(const RotatedGeometry<A>& g,
                                                 int64_t pooled_h,
                                                 int64_t pooled_w, A* y_min,
                                                 A* y_max, A* x_min,
                                                 A* x_max) {
  if (g.grid_h <= 0 || g.grid_w <= 0) return false;
  bool first = true;
  for (int corner = 0; corner < 4; ++corner) {
    const bool top = corner & 1, right = corner & 2;
    A y, x;
    sample_point(g, top ? pooled_h - 1 : 0, right ? pooled_w - 1 : 0,
                 top ? g.grid_h - 1 : 0, right ? g.grid_w - 1 : 0, &y, &x);
    if (first) {
      *y_min = *y_max = y;
      *x_min = *x_max = x;
      first = false;
    } else {
      *y_min = min_of(*y_min, y);
      *y_max = max_of(*y_max, y);
      *x_min = min_of(*x_min, x);
      *x_max = max_of(*x_max, x);
    }
  }
  return true;
}

}  // namespace roi_align_rotated_detail
}  // namespace visdet_ops
