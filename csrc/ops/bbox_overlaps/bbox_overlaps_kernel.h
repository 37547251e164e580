// bbox_overlaps math shared by the CPU loop and the CUDA kernels. Torch-free.
#pragma once

#include "common/macros.h"

namespace visdet_ops {
namespace bbox_overlaps_detail {

enum Mode : int { kIoU = 0, kIoF = 1, kGIoU = 2 };

// mmdet's bbox_overlaps for one pair, with mmcv's `offset` (legacy +1 pixel)
// applied to every width and height. Any non-finite coordinate gives NaN.
// eps is mmdet's (default 1e-6): the union (iou, giou), the area of box a (iof)
// and the enclosing area (giou) are clamped to at least eps, so degenerate
// boxes give 0, not NaN.
template <typename T>
VISDET_HOST_DEVICE VISDET_INLINE T overlap(const T* a, const T* b, int mode,
                                           T offset, T eps) {
  const T area_a = (a[2] - a[0] + offset) * (a[3] - a[1] + offset);
  const T area_b = (b[2] - b[0] + offset) * (b[3] - b[1] + offset);
  const T width = max_of(min_of(a[2], b[2]) - max_of(a[0], b[0]) + offset, T(0));
  const T height =
      max_of(min_of(a[3], b[3]) - max_of(a[1], b[1]) + offset, T(0));
  const T inter = width * height;
  const T uni = max_of(mode == kIoF ? area_a : area_a + area_b - inter, eps);
  // 0 for finite boxes, NaN when a coordinate is NaN or infinite (max_of and
  // min_of above would otherwise hide a NaN).
  const T poison = (a[0] + a[1] + a[2] + a[3] + b[0] + b[1] + b[2] + b[3]) * T(0);
  const T ious = inter / uni + poison;
  if (mode != kGIoU) return ious;
  const T enclose_w =
      max_of(max_of(a[2], b[2]) - min_of(a[0], b[0]) + offset, T(0));
  const T enclose_h =
      max_of(max_of(a[3], b[3]) - min_of(a[1], b[1]) + offset, T(0));
  const T enclose = max_of(enclose_w * enclose_h, eps);
  return ious - (enclose - uni) / enclose;
}

}  // namespace bbox_overlaps_detail
}  // namespace visdet_ops
