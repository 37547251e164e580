// box_iou_rotated math shared by the CPU loops and the CUDA kernels: the
// rotated-box geometry of the family home (ops/_rotated/rotated_kernel.h)
// and the op's modes. Torch-free.
#pragma once

#include "common/macros.h"
#include "ops/_rotated/rotated_kernel.h"

namespace visdet_ops {
namespace box_iou_rotated_detail {

// mmcv's mode_flag values.
enum Mode : int { kIoU = 0, kIoF = 1 };

// The value of one pair: IoU, or the intersection over box a's area (IoF).
template <typename A>
VISDET_HOST_DEVICE VISDET_INLINE A pair_value(
    const rotated_detail::RotatedBox<A>& a,
    const rotated_detail::RotatedBox<A>& b, int mode) {
  return rotated_detail::overlap(a, b, mode == kIoF);
}

}  // namespace box_iou_rotated_detail
}  // namespace visdet_ops
