// What the box ops of the NMS family (nms, batched_nms, nms_match, soft_nms)
// share: their input checks. Written against the host adapter (common/host.h): one source
// for the classic and the stable build.
#pragma once

#include <optional>

#include "common/host.h"

namespace visdet_ops {

// boxes (argument arg) is [N, columns] floating; shape names it in the error.
void check_boxes(const char* op, const host::Tensor& boxes, const char* arg,
                 int64_t columns, const char* shape);

// iou_threshold is not NaN.
void check_threshold(const char* op, double iou_threshold);

// scores (for boxes, argument boxes_arg) is [N] floating on the boxes'
// device; classes (optional, argument classes_arg: idxs, labels) is [N]
// integer on it.
void check_scores(const char* op, const host::Tensor& boxes,
                  const char* boxes_arg, const host::Tensor& scores);
void check_classes(const char* op, const host::Tensor& boxes,
                   const char* boxes_arg,
                   const std::optional<host::Tensor>& classes,
                   const char* classes_arg);

// The input checks of the NMS family's ops (nms, batched_nms, soft_nms): boxes
// [N, 4] floating, scores [N] of the same dtype and device, offset 0 or 1,
// iou_threshold not NaN, idxs (optional) [N] integer on the same device.
void check_nms_inputs(const char* op, const host::Tensor& boxes,
                      const host::Tensor& scores,
                      const std::optional<host::Tensor>& idxs,
                      double iou_threshold, int64_t offset);

}  // namespace visdet_ops
