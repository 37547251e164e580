// Torch-facing helpers shared by the CPU and CUDA host layers of bbox_overlaps.
#pragma once

#include <ATen/core/Tensor.h>

#include "bbox_overlaps_launch.h"

namespace visdet_ops {

// Checked inputs as contiguous [batch, rows, 4] / [batch, cols, 4] and the
// uninitialised output ([..., rows, cols], or [..., rows] when aligned).
struct BboxOverlapsPrepared {
  BboxOverlapsShape shape;
  at::Tensor boxes1, boxes2, output;
};

BboxOverlapsPrepared bbox_overlaps_prepare(const at::Tensor& bboxes1,
                                           const at::Tensor& bboxes2,
                                           int64_t mode, bool aligned,
                                           int64_t offset, double eps);

}  // namespace visdet_ops
