// RoIPool math (mmcv semantics) shared by the CPU loops and CUDA kernels.
// Torch-free: pointers and sizes only.
//
// mmcv's rule, which differs from torchvision's: RoI corners are scaled but
// not rounded, the far corner is inclusive (x2 + 1, y2 + 1), and bin ph of a
// RoI covers rows [floor(y1 + ph * bin_h), ceil(y1 + (ph + 1) * bin_h)),
// clipped to the map. torchvision rounds the scaled corners to integers first;
// the two agree for integer RoIs at spatial_scale 1 (up to float rounding of
// the bin edges).
#pragma once

#include <cmath>
#include <cstdint>

#include "common/macros.h"
#include "ops/_rois/rois_kernel.h"
#include "common/scalar.h"

namespace visdet_ops {
namespace roi_pool_detail {

// a * b, rounded, and never fused with a neighbouring add into a fused
// multiply-add: the RoI corners and bin edges then come out the same on every
// device and in a plain PyTorch reference of the same dtype. (A bin edge that
// lands on an integer would otherwise move by a pixel with the compiler's
// contraction; nvcc contracts by default, GCC where the target has FMA.)
template <typename A>
VISDET_HOST_DEVICE VISDET_INLINE A mul_rounded(A a, A b);
template <>
VISDET_HOST_DEVICE VISDET_INLINE float mul_rounded<float>(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  const volatile float product = a * b;
  return product;
#endif
}
template <>
VISDET_HOST_DEVICE VISDET_INLINE double mul_rounded<double>(double a,
                                                            double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  const volatile double product = a * b;
  return product;
#endif
}

// floor or ceil of v, clipped to [0, limit], as an index. Clipping in floating
// point first keeps the conversion defined for any finite v.
template <typename A, typename I>
VISDET_HOST_DEVICE VISDET_INLINE I clip_to_index(A v, I limit) {
  if (!(v > A(0))) return I(0);
  if (v >= static_cast<A>(limit)) return limit;
  return static_cast<I>(v);
}

// The scaled origin and bin sizes of a valid RoI; empty_roi when it has no
// area (x2 + 1 <= x1 or y2 + 1 <= y1 after scaling: every bin gives 0).
template <typename A>
struct RoIPoolGeometry {
  A x1, y1, bin_w, bin_h;
  bool empty_roi;
};

template <typename A, typename I>
VISDET_HOST_DEVICE VISDET_INLINE RoIPoolGeometry<A> roi_pool_geometry(
    const A* roi, A spatial_scale, I pooled_h, I pooled_w) {
  RoIPoolGeometry<A> g;
  g.x1 = mul_rounded(to_acc(roi[1]), spatial_scale);
  g.y1 = mul_rounded(to_acc(roi[2]), spatial_scale);
  const A x2 = mul_rounded(to_acc(roi[3]) + A(1), spatial_scale);
  const A y2 = mul_rounded(to_acc(roi[4]) + A(1), spatial_scale);
  const A roi_w = x2 - g.x1;
  const A roi_h = y2 - g.y1;
  g.empty_roi = !(roi_w > A(0) && roi_h > A(0));
  g.bin_w = roi_w / static_cast<A>(pooled_w);
  g.bin_h = roi_h / static_cast<A>(pooled_h);
  return g;
}

// Bin p of an axis covers [bin_start, bin_end), clipped to [0, limit].
template <typename A, typename I>
VISDET_HOST_DEVICE VISDET_INLINE I bin_start(A origin, A bin, I p, I limit) {
  return clip_to_index<A, I>(floor(mul_rounded(static_cast<A>(p), bin) + origin),
                             limit);
}
template <typename A, typename I>
VISDET_HOST_DEVICE VISDET_INLINE I bin_end(A origin, A bin, I p, I limit) {
  return clip_to_index<A, I>(
      ceil(mul_rounded(static_cast<A>(p + 1), bin) + origin), limit);
}

// One output element, (k, c, ph, pw) of the [K, C, PH, PW] output, at its
// offset index there (a caller may walk the elements in any order).
// The output is the largest input value in the bin (in row-major order, the
// first of equal ones) and argmax its offset h * width + w in the input plane;
// an empty bin (or an empty RoI: x2 + 1 <= x1 or y2 + 1 <= y1 after scaling)
// gives 0 and argmax -1. An invalid RoI (roi_flags != 0: non-finite, or batch
// index outside [0, batch_size)) gives NaN and argmax -1 and reads no input.
template <typename T, typename I>
VISDET_HOST_DEVICE VISDET_INLINE void roi_pool_forward_at(
    I index, I k, I c, I ph, I pw, const T* input, const acc_t<T>* rois,
    int64_t batch_size, I channels, I height, I width, I pooled_h, I pooled_w,
    acc_t<T> spatial_scale, T* output, int32_t* argmax) {
  using A = acc_t<T>;
  const acc_t<T>* roi = rois + k * 5;
  if (roi_flags(roi, batch_size) != 0) {
    output[index] = from_acc<T>(quiet_nan<A>());
    argmax[index] = -1;
    return;
  }
  const I batch = static_cast<I>(to_acc(roi[0]));
  const RoIPoolGeometry<A> g = roi_pool_geometry(roi, spatial_scale, pooled_h,
                                                 pooled_w);
  if (g.empty_roi) {
    output[index] = from_acc<T>(A(0));
    argmax[index] = -1;
    return;
  }
  const I w_start = bin_start(g.x1, g.bin_w, pw, width);
  const I w_end = bin_end(g.x1, g.bin_w, pw, width);
  const I h_start = bin_start(g.y1, g.bin_h, ph, height);
  const I h_end = bin_end(g.y1, g.bin_h, ph, height);
  const bool empty = h_end <= h_start || w_end <= w_start;

  const T* plane = input + (batch * channels + c) * height * width;
  A best = empty ? A(0) : lowest_value<A>();
  int32_t best_index = -1;
  for (I h = h_start; h < h_end; ++h) {
    for (I w = w_start; w < w_end; ++w) {
      const I offset = h * width + w;
      const A v = to_acc(plane[offset]);
      if (v > best) {
        best = v;
        best_index = static_cast<int32_t>(offset);
      }
    }
  }
  output[index] = from_acc<T>(best);
  argmax[index] = best_index;
}

// The element at offset index, in row-major order.
template <typename T, typename I>
VISDET_HOST_DEVICE VISDET_INLINE void roi_pool_forward_element(
    I index, const T* input, const acc_t<T>* rois, int64_t batch_size, I channels,
    I height, I width, I pooled_h, I pooled_w, acc_t<T> spatial_scale,
    T* output, int32_t* argmax) {
  const PooledElement<I> e =
      row_major_element<I>(index, channels, pooled_h, pooled_w);
  roi_pool_forward_at<T, I>(index, e.k, e.c, e.ph, e.pw, input, rois, batch_size,
                            channels, height, width, pooled_h, pooled_w,
                            spatial_scale, output, argmax);
}

// Backward of one output element: add(offset, grad) (grad in the compute
// type) to the input element its forward chose, if any. Safe on any rois and
// argmax: an invalid RoI or an argmax outside [0, height * width) adds
// nothing.
template <typename T, typename I, typename AddFn>
VISDET_HOST_DEVICE VISDET_INLINE void roi_pool_backward_at(
    I index, I k, I c, const T* grad_output, const acc_t<T>* rois,
    const int32_t* argmax, int64_t batch_size, I channels, I height, I width,
    AddFn add) {
  const int32_t chosen = argmax[index];
  if (chosen < 0 || static_cast<I>(chosen) >= height * width) return;
  const acc_t<T>* roi = rois + k * 5;
  if (roi_flags(roi, batch_size) != 0) return;
  const I batch = static_cast<I>(to_acc(roi[0]));
  add((batch * channels + c) * height * width + static_cast<I>(chosen),
      to_acc(grad_output[index]));
}

// The element at offset index, in row-major order.
template <typename T, typename I, typename AddFn>
VISDET_HOST_DEVICE VISDET_INLINE void roi_pool_backward_element(
    I index, const T* grad_output, const acc_t<T>* rois, const int32_t* argmax,
    int64_t batch_size, I channels, I height, I width, I pooled_h, I pooled_w,
    AddFn add) {
  const PooledElement<I> e =
      row_major_element<I>(index, channels, pooled_h, pooled_w);
  roi_pool_backward_at<T, I>(index, e.k, e.c, grad_output, rois, argmax,
                             batch_size, channels, height, width, add);
}

}  // namespace roi_pool_detail
}  // namespace visdet_ops
