// NMS math shared by the CPU loop and the CUDA kernels. Torch-free.
#pragma once

#include "common/macros.h"

namespace visdet_ops {
namespace nms_detail {

// mmcv's rule: box b is suppressed by a higher-scored box a when
// IoU(a, b) > threshold. Written without the division (inter > thr * union)
// so that degenerate boxes (union == 0) never suppress and never divide by 0;
// NaN coordinates compare false and are therefore never suppressed.
// `offset` is mmcv's legacy +1 pixel convention (0 or 1).
template <typename T>
VISDET_HOST_DEVICE VISDET_INLINE bool suppresses(const T* a, const T* b,
                                                 T iou_threshold, T offset) {
  const T left = max_of(a[0], b[0]);
  const T right = min_of(a[2], b[2]);
  const T top = max_of(a[1], b[1]);
  const T bottom = min_of(a[3], b[3]);
  const T width = max_of(right - left + offset, T(0));
  const T height = max_of(bottom - top + offset, T(0));
  const T inter = width * height;
  const T area_a = (a[2] - a[0] + offset) * (a[3] - a[1] + offset);
  const T area_b = (b[2] - b[0] + offset) * (b[3] - b[1] + offset);
  return inter > iou_threshold * (area_a + area_b - inter);
}

}  // namespace nms_detail
}  // namespace visdet_ops
