// The prepared arguments of bbox_overlaps, shared by the CPU and CUDA host
// layers. Written against the host adapter (common/host.h): one source for the
// classic and the stable build.
#pragma once

#include "bbox_overlaps_launch.h"
#include "common/host.h"

namespace visdet_ops {

// Checked inputs as contiguous [batch, rows, 4] / [batch, cols, 4] boxes in
// the compute dtype and the uninitialised output in it ([..., rows, cols], or
// [..., rows] when aligned); result() gives the output in bboxes1's dtype.
struct BboxOverlapsPrepared {
  BboxOverlapsShape shape;
  host::ScalarType dtype;  // bboxes1's: the dtype of the result
  host::Tensor boxes1, boxes2, output;
  host::Tensor result() const;
};

// mode: "iou", "iof" or "giou". widen_16bit: float16 / bfloat16 boxes are
// computed in float32 (the CPU kernels); else in their own dtype (CUDA).
BboxOverlapsPrepared bbox_overlaps_prepare(const host::Tensor& bboxes1,
                                           const host::Tensor& bboxes2,
                                           host::StringArg mode, bool aligned,
                                           int64_t offset, double eps,
                                           bool widen_16bit);

}  // namespace visdet_ops
