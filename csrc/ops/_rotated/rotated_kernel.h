// Rotated boxes (x, y, w, h, angle in radians): the geometry box_iou_rotated
// and nms_rotated share, on the CPU and in CUDA kernels. Torch-free.
//
// A box is its centre plus R(angle) [+-w/2, +-h/2], R the rotation matrix
// [[cos, -sin], [sin, cos]]: with y pointing down (image coordinates) a
// positive angle turns the box clockwise, mmcv's default convention;
// clockwise=false negates the angle first (mmcv's flip of the angle column).
//
// The IoU of two boxes is computed in the frame of the one with the shorter
// side (the second on a tie; overlap says why): centred on its centre and
// turned by minus its angle, so that it is the axis-aligned rectangle
// [-w2/2, w2/2] x [-h2/2, h2/2]. The first box's centre offset
// (x1 - x2, y1 - y2) is exact in floating point for nearby boxes (Sterbenz),
// whatever their absolute coordinates: a 2 px box at x = 1e6 keeps its float32
// precision, as mmcv's subtraction of the two centres' mean intends (that mean
// is itself rounded). Its corners are clipped against the rectangle's four
// sides (Sutherland-Hodgman: no parallel-edge threshold, no convex hull sort)
// and the polygon's area is the intersection.
//
// Exact cases, by construction rather than by rounding luck:
// - identical boxes: the intersection is the area, so IoU and IoF are 1;
// - one box inside the other (all four corners inside, as computed): the
//   intersection is the smaller box's w * h, so IoU is the ratio of areas;
// - circumscribed circles apart (with a relative margin far above the test's
//   rounding, so that it never drops a pair whose boxes meet): 0, without
//   clipping; axis-aligned boxes that touch get an empty clipped polygon: 0.
// Degenerate boxes are mmcv's: w * h < 1e-14 has IoU 0 with every box (a box
// with w and h both negative is the same box as with |w|, |h|, as in mmcv).
// A non-finite parameter (or an area beyond the dtype's range) gives NaN.
#pragma once

#include <cmath>

#include "common/macros.h"
#include "common/scalar.h"

namespace visdet_ops {
namespace rotated_detail {

// mmcv's degenerate rule: a box with w * h below this has IoU 0.
constexpr double kMinArea = 1e-14;
// The circumscribed-circle reject drops a pair when the squared centre
// distance exceeds (r1 + r2)^2 by this relative margin: about 10 ulps of
// float32 rounding go into the test, this is 128 times that.
constexpr double kReachSlack = 1.0 / 65536;
// Vertices of a clipped polygon. A convex quadrilateral clipped by four
// half-planes has at most 8; the buffers have room for 16 and every write is
// bounded, so rounding that makes a polygon slightly non-convex can never
// write past them.
constexpr int kMaxVertices = 16;

// One box, ready for any number of pairs: what the pair test needs, computed
// once per box (the trigonometry and the circumscribed circle).
template <typename A>
struct RotatedBox {
  A x, y;    // centre
  A c, s;    // cos and sin of the clockwise angle
  A hw, hh;  // half width and half height (absolute values)
  A area;    // w * h as given (mmcv's); NaN for a non-finite box
  A radius;  // of the circumscribed circle
};

// float and double overloads with the same signatures in nvcc's host and
// device passes; only the bodies differ.
#if defined(__CUDA_ARCH__)
#define VISDET_ROTATED_MATH(host_fn, device_fn) device_fn
#else
#define VISDET_ROTATED_MATH(host_fn, device_fn) host_fn
#endif
VISDET_HOST_DEVICE VISDET_INLINE float abs_of(float v) {
  return VISDET_ROTATED_MATH(std::fabs, fabsf)(v);
}
VISDET_HOST_DEVICE VISDET_INLINE double abs_of(double v) {
  return VISDET_ROTATED_MATH(std::fabs, fabs)(v);
}
VISDET_HOST_DEVICE VISDET_INLINE float sqrt_of(float v) {
  return VISDET_ROTATED_MATH(std::sqrt, sqrtf)(v);
}
VISDET_HOST_DEVICE VISDET_INLINE double sqrt_of(double v) {
  return VISDET_ROTATED_MATH(std::sqrt, sqrt)(v);
}
VISDET_HOST_DEVICE VISDET_INLINE bool is_finite_value(float v) {
  return VISDET_ROTATED_MATH(std::isfinite, isfinite)(v);
}
VISDET_HOST_DEVICE VISDET_INLINE bool is_finite_value(double v) {
  return VISDET_ROTATED_MATH(std::isfinite, isfinite)(v);
}
VISDET_HOST_DEVICE VISDET_INLINE void sincos_of(float a, float* s, float* c) {
#if defined(__CUDA_ARCH__)
  sincosf(a, s, c);
#else
  *s = std::sin(a);
  *c = std::cos(a);
#endif
}
VISDET_HOST_DEVICE VISDET_INLINE void sincos_of(double a, double* s,
                                                double* c) {
#if defined(__CUDA_ARCH__)
  sincos(a, s, c);
#else
  *s = std::sin(a);
  *c = std::cos(a);
#endif
}
#undef VISDET_ROTATED_MATH

template <typename A>
VISDET_HOST_DEVICE VISDET_INLINE RotatedBox<A> make_box(A x, A y, A w, A h,
                                                        A angle,
                                                        bool clockwise) {
  RotatedBox<A> b;
  sincos_of(clockwise ? angle : -angle, &b.s, &b.c);
  b.x = x;
  b.y = y;
  b.hw = abs_of(w) * A(0.5);
  b.hh = abs_of(h) * A(0.5);
  b.area = w * h;
  const bool ok = is_finite_value(x) && is_finite_value(y) &&
                  is_finite_value(w) && is_finite_value(h) &&
                  is_finite_value(angle) && is_finite_value(b.area);
  if (!ok) b.area = quiet_nan<A>();
  b.radius = sqrt_of(b.hw * b.hw + b.hh * b.hh);
  return b;
}

// The box of a [5] row (x, y, w, h, angle) of storage type T, in its compute
// type (float for float16 / bfloat16).
template <typename T>
VISDET_HOST_DEVICE VISDET_INLINE RotatedBox<acc_t<T>> load_box(const T* p,
                                                               bool clockwise) {
  return make_box(to_acc(p[0]), to_acc(p[1]), to_acc(p[2]), to_acc(p[3]),
                  to_acc(p[4]), clockwise);
}

template <typename A>
VISDET_HOST_DEVICE VISDET_INLINE bool same_box(const RotatedBox<A>& a,
                                               const RotatedBox<A>& b) {
  return a.x == b.x && a.y == b.y && a.c == b.c && a.s == b.s &&
         a.hw == b.hw && a.hh == b.hh;
}

// One Sutherland-Hodgman pass: the part of polygon (px, py)[0, n) where
// sign * coordinate <= bound (coordinate: x when along_x, else y), into
// (ox, oy). Points on the line are inside; a crossing point lies exactly on
// the line.
template <typename A>
VISDET_HOST_DEVICE VISDET_INLINE int clip_pass(const A* px, const A* py, int n,
                                               bool along_x, A sign, A bound,
                                               A* ox, A* oy) {
  int m = 0;
  for (int i = 0; i < n; ++i) {
    const int j = i + 1 == n ? 0 : i + 1;
    const A di = sign * (along_x ? px[i] : py[i]) - bound;
    const A dj = sign * (along_x ? px[j] : py[j]) - bound;
    if (di <= A(0) && m < kMaxVertices) {
      ox[m] = px[i];
      oy[m] = py[i];
      ++m;
    }
    if (((di < A(0) && dj > A(0)) || (di > A(0) && dj < A(0))) &&
        m < kMaxVertices) {
      const A t = di / (di - dj);
      if (along_x) {
        ox[m] = sign * bound;
        oy[m] = py[i] + t * (py[j] - py[i]);
      } else {
        ox[m] = px[i] + t * (px[j] - px[i]);
        oy[m] = sign * bound;
      }
      ++m;
    }
  }
  return m;
}

// Whether every corner of the parallelogram centre + (+-U +-V) lies in
// [-hw, hw] x [-hh, hh].
template <typename A>
VISDET_HOST_DEVICE VISDET_INLINE bool corners_inside(A dx, A dy, A ux, A uy,
                                                     A vx, A vy, A hw, A hh) {
  const A ex = abs_of(ux) + abs_of(vx);
  const A ey = abs_of(uy) + abs_of(vy);
  return abs_of(dx) + ex <= hw && abs_of(dy) + ey <= hh;
}

// The area of the intersection of boxes a and b (both with area >= kMinArea).
template <typename A>
VISDET_HOST_DEVICE VISDET_INLINE A intersection_area(const RotatedBox<A>& a,
                                                     const RotatedBox<A>& b) {
  const A dx = a.x - b.x;
  const A dy = a.y - b.y;
  // cos and sin of angle(a) - angle(b)
  const A rc = b.c * a.c + b.s * a.s;
  const A rs = b.c * a.s - b.s * a.c;
  // a's centre and half axes in b's frame
  const A cx = b.c * dx + b.s * dy;
  const A cy = b.c * dy - b.s * dx;
  const A ux = a.hw * rc, uy = a.hw * rs;
  const A vx = -a.hh * rs, vy = a.hh * rc;
  if (corners_inside(cx, cy, ux, uy, vx, vy, b.hw, b.hh)) return a.area;
  // b's centre and half axes in a's frame (the rotation by minus the angle
  // difference)
  const A ex = -(a.c * dx + a.s * dy);
  const A ey = -(a.c * dy - a.s * dx);
  if (corners_inside(ex, ey, b.hw * rc, -b.hw * rs, b.hh * rs, b.hh * rc,
                     a.hw, a.hh)) {
    return b.area;
  }
  A x0[kMaxVertices], y0[kMaxVertices], x1[kMaxVertices], y1[kMaxVertices];
  // a's corners, counter-clockwise in (x right, y up) terms
  x0[0] = cx - ux - vx;
  y0[0] = cy - uy - vy;
  x0[1] = cx + ux - vx;
  y0[1] = cy + uy - vy;
  x0[2] = cx + ux + vx;
  y0[2] = cy + uy + vy;
  x0[3] = cx - ux + vx;
  y0[3] = cy - uy + vy;
  int n = clip_pass(x0, y0, 4, true, A(1), b.hw, x1, y1);
  n = clip_pass(x1, y1, n, true, A(-1), b.hw, x0, y0);
  n = clip_pass(x0, y0, n, false, A(1), b.hh, x1, y1);
  n = clip_pass(x1, y1, n, false, A(-1), b.hh, x0, y0);
  if (n < 3) return A(0);
  // Fan from vertex 0 (all coordinates are within the boxes' size of 0).
  A twice = A(0);
  for (int i = 1; i + 1 < n; ++i) {
    twice += (x0[i] - x0[0]) * (y0[i + 1] - y0[0]) -
             (x0[i + 1] - x0[0]) * (y0[i] - y0[0]);
  }
  return abs_of(twice) * A(0.5);
}

// IoU (iof == false) or intersection over a's area (iof == true) of boxes a
// and b, with the conventions of this file's header.
template <typename A>
VISDET_HOST_DEVICE VISDET_INLINE A overlap(const RotatedBox<A>& a,
                                           const RotatedBox<A>& b, bool iof) {
  if (a.area != a.area || b.area != b.area) return quiet_nan<A>();
  if (a.area < A(kMinArea) || b.area < A(kMinArea)) return A(0);
  A inter;
  if (same_box(a, b)) {
    inter = a.area;
  } else {
    const A dx = a.x - b.x;
    const A dy = a.y - b.y;
    const A reach = a.radius + b.radius;
    if (dx * dx + dy * dy > reach * reach * A(1 + kReachSlack)) return A(0);
    // Clipped in the frame of the box with the shorter side, whose rectangle
    // is then exact: the other's corners carry about eps times the centres'
    // distance, which moves the area by that times the short side. In the
    // other frame the short side itself would carry that error (a 60 x 0.05
    // box 30 px from the other's centre: 4e-5 of its IoF in float32, 1e-7
    // this way). Either order of a pair computes the same. The two boxes are
    // swapped by selects and clipped by one call: a branch between two calls
    // made a CUDA warp whose pairs choose differently run both (run 29:
    // box_iou_rotated 2000 x 2000 0.086 -> 0.117 ms).
    const bool a_thinner = min_of(a.hw, a.hh) < min_of(b.hw, b.hh);
    const RotatedBox<A> outer = a_thinner ? b : a;
    const RotatedBox<A> frame = a_thinner ? a : b;
    const A clipped = intersection_area(outer, frame);
    // Rounding can leave the clipped area a hair above the smaller box's.
    inter = min_of(clipped, min_of(a.area, b.area));
  }
  return inter / (iof ? a.area : a.area + b.area - inter);
}

}  // namespace rotated_detail
}  // namespace visdet_ops
