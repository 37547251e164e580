// The prepared arguments of nms_rotated, shared by the CPU and CUDA host
// layers. Written against the host adapter (common/host.h): one source for the
// classic and the stable build.
#pragma once

#include <optional>

#include "common/host.h"

namespace visdet_ops {

// What every device's rotated NMS needs, checked and prepared once:
// order: [n] stable descending-score order (input indices);
// boxes: [n, 5] contiguous rows in that order, in the compute dtype (float32
//   for float16/bfloat16 inputs, else the input dtype);
// classes: [n] int64 labels in that order, undefined without labels.
struct NmsRotatedPrepared {
  host::Tensor order, boxes, classes;
  bool has_classes = false;
  int64_t n = 0;
};

NmsRotatedPrepared nms_rotated_prepare(const host::Tensor& dets,
                                       const host::Tensor& scores,
                                       double iou_threshold,
                                       const std::optional<host::Tensor>& labels);

}  // namespace visdet_ops
