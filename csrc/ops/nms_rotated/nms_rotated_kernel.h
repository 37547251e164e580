// nms_rotated math shared by the CPU loops and the CUDA kernels: the
// rotated-box geometry of the family home (ops/_rotated/rotated_kernel.h).
// Torch-free.
#pragma once

#include "common/macros.h"
#include "ops/_rotated/rotated_kernel.h"

namespace visdet_ops {
namespace nms_rotated_detail {

// Whether box a (higher scored, kept) suppresses box b: mmcv's CUDA rule,
// IoU > iou_threshold, with the IoU box_iou_rotated computes for (a, b). A
// degenerate box has IoU 0 (it suppresses and is suppressed only for a
// negative threshold); a non-finite one has IoU NaN, which never suppresses.
// The circumscribed-circle reject inside overlap() gives 0 for far-apart
// pairs without clipping, which is the same answer for every threshold.
template <typename A>
VISDET_HOST_DEVICE VISDET_INLINE bool suppresses(
    const rotated_detail::RotatedBox<A>& a,
    const rotated_detail::RotatedBox<A>& b, A iou_threshold) {
  return rotated_detail::overlap(a, b, false) > iou_threshold;
}

}  // namespace nms_rotated_detail
}  // namespace visdet_ops
