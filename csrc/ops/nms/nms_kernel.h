// NMS math shared by the CPU loops and the CUDA kernels. Torch-free.
#pragma once

#include "common/macros.h"

namespace visdet_ops {
namespace nms_detail {

// Whether box a (higher scored, kept) claims box b.
//
// Inclusive == false, nms / batched_nms (mmcv's rule IoU > threshold):
//   inter > thr * union, written without the division so that degenerate
//   boxes (union == 0) never suppress and nothing divides by 0.
// Inclusive == true, nms_match (mmcv's rule IoU >= threshold): additionally
//   union > 0, since mmcv's 0 / 0 is NaN and NaN >= thr is false.
// NaN coordinates compare false and therefore never suppress.
// `offset` is mmcv's legacy +1 pixel convention (0 or 1).
template <typename T>
VISDET_HOST_DEVICE VISDET_INLINE T box_area(const T* a, T offset) {
  return (a[2] - a[0] + offset) * (a[3] - a[1] + offset);
}

// overlaps() with the two areas given (box_area of each): the CPU loops
// compute every area once instead of once per pair.
template <bool Inclusive, typename T>
VISDET_HOST_DEVICE VISDET_INLINE bool overlaps_with_areas(const T* a,
                                                          const T* b, T area_a,
                                                          T area_b,
                                                          T iou_threshold,
                                                          T offset) {
  const T left = max_of(a[0], b[0]);
  const T right = min_of(a[2], b[2]);
  const T top = max_of(a[1], b[1]);
  const T bottom = min_of(a[3], b[3]);
  const T width = max_of(right - left + offset, T(0));
  const T height = max_of(bottom - top + offset, T(0));
  const T inter = width * height;
  const T uni = area_a + area_b - inter;
  if (Inclusive) return uni > T(0) && inter >= iou_threshold * uni;
  return inter > iou_threshold * uni;
}

template <bool Inclusive, typename T>
VISDET_HOST_DEVICE VISDET_INLINE bool overlaps(const T* a, const T* b,
                                               T iou_threshold, T offset) {
  return overlaps_with_areas<Inclusive>(a, b, box_area(a, offset),
                                        box_area(b, offset), iou_threshold,
                                        offset);
}

template <typename T>
VISDET_HOST_DEVICE VISDET_INLINE bool suppresses(const T* a, const T* b,
                                                 T iou_threshold, T offset) {
  return overlaps<false>(a, b, iou_threshold, offset);
}

}  // namespace nms_detail
}  // namespace visdet_ops
