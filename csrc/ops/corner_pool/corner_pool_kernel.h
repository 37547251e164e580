// Corner pooling (CornerNet; mmcv.ops.CornerPool) math shared by the CPU loops
// and the CUDA kernels. Torch-free.
//
// Every pool is a running maximum along one axis of [N, C, H, W]:
//   bottom: from top to bottom along H     top:   from bottom to top along H
//   right:  from left to right along W     left:  from right to left along W
// viewed as [outer, length, inner] lanes (H pools: outer = N*C, inner = W;
// W pools: outer = N*C*H, inner = 1).
//
// The tie and NaN rule is torch.cummax's (which mmcv's CornerPool calls): in
// scan order the current element takes over the running maximum when it is
// NaN, or when the maximum is not NaN and the element is >= it. So among equal
// maxima the gradient goes to the one nearest the output position (for 'top'
// and 'left' mmcv flips, takes cummax and flips back, which is the same rule
// in the reversed scan order), and a NaN propagates down the scan.
#pragma once

#include <cstdint>

#include "common/macros.h"

namespace visdet_ops {
namespace corner_pool_detail {

enum Mode : int { kTop = 0, kBottom = 1, kLeft = 2, kRight = 3 };

template <typename A>
VISDET_HOST_DEVICE VISDET_INLINE bool takes_over(A x, A best) {
  return x != x || (!(best != best) && x >= best);
}

}  // namespace corner_pool_detail
}  // namespace visdet_ops
