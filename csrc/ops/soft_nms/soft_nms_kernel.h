// Soft-NMS math shared by the CPU loop and the CUDA kernel. Torch-free.
#pragma once

#include <cmath>

#include "common/macros.h"

namespace visdet_ops {
namespace soft_nms_detail {

// mmcv's method numbers.
enum Method : int { kNaive = 0, kLinear = 1, kGaussian = 2 };

// IoU as mmcv computes it (inter / union, `offset` = legacy +1 pixel), except
// that a degenerate pair (union <= 0) or a NaN coordinate gives 0 instead of
// NaN: one bad box must not turn every other score into NaN.
template <typename T>
VISDET_HOST_DEVICE VISDET_INLINE T iou(const T* a, const T* b, T offset) {
  const T width = max_of(min_of(a[2], b[2]) - max_of(a[0], b[0]) + offset, T(0));
  const T height =
      max_of(min_of(a[3], b[3]) - max_of(a[1], b[1]) + offset, T(0));
  const T inter = width * height;
  const T area_a = (a[2] - a[0] + offset) * (a[3] - a[1] + offset);
  const T area_b = (b[2] - b[0] + offset) * (b[3] - b[1] + offset);
  const T uni = area_a + area_b - inter;
  const T ovr = uni > T(0) ? inter / uni : T(0);
  return ovr == ovr ? ovr : T(0);
}

VISDET_HOST_DEVICE VISDET_INLINE float exp_of(float x) {
#if defined(__CUDA_ARCH__)
  return ::expf(x);
#else
  return std::exp(x);
#endif
}
VISDET_HOST_DEVICE VISDET_INLINE double exp_of(double x) {
#if defined(__CUDA_ARCH__)
  return ::exp(x);
#else
  return std::exp(x);
#endif
}

// mmcv's score weight for a box overlapping the picked box by `ovr`.
template <typename T>
VISDET_HOST_DEVICE VISDET_INLINE T weight(T ovr, int method, T iou_threshold,
                                          T sigma) {
  if (method == kNaive) return ovr >= iou_threshold ? T(0) : T(1);
  if (method == kLinear) return ovr >= iou_threshold ? T(1) - ovr : T(1);
  return exp_of(-(ovr * ovr) / sigma);
}

// A score that is still in the running: dropped boxes (and NaN input scores)
// are marked NaN.
template <typename T>
VISDET_HOST_DEVICE VISDET_INLINE bool alive(T score) {
  return score == score;
}

// The pick order: higher score first, ties to the lower position (position
// order is input order within a class).
template <typename T>
VISDET_HOST_DEVICE VISDET_INLINE bool better(T score, int64_t pos, T best,
                                             int64_t best_pos) {
  return best_pos < 0 || score > best || (score == best && pos < best_pos);
}

}  // namespace soft_nms_detail
}  // namespace visdet_ops
