// The NMS family's input checks (boxes.h).
#include "boxes.h"

#include <cmath>
#include <optional>

#include "common/checks.h"
#include "common/host.h"

namespace visdet_ops {

using host::Tensor;

void check_boxes(const char* op, const Tensor& boxes, const char* arg,
                 int64_t columns, const char* shape) {
  check_dim(boxes, 2, op, arg);
  check_size(boxes, 1, columns, op, arg, shape);
  check_floating(boxes, op, arg);
}

void check_threshold(const char* op, double iou_threshold) {
  VISDET_CHECK(!std::isnan(iou_threshold), op,
               ": iou_threshold must be a number, got nan");
}

void check_scores(const char* op, const Tensor& boxes, const char* boxes_arg,
                  const Tensor& scores) {
  check_dim(scores, 1, op, "scores");
  VISDET_CHECK(scores.size(0) == boxes.size(0), op,
               ": scores must have shape [N] with N = ", boxes_arg,
               ".size(0) = ", boxes.size(0), ", got ", host::shape_of(scores));
  // scores only order the boxes (and soft_nms decays them in the compute
  // dtype), so they may differ in dtype from the boxes: float32 boxes beside
  // 16-bit scores is what an AMP step produces.
  check_floating(scores, op, "scores");
  check_same_device(boxes, scores, op, boxes_arg, "scores");
}

void check_classes(const char* op, const Tensor& boxes, const char* boxes_arg,
                   const std::optional<Tensor>& classes,
                   const char* classes_arg) {
  if (!classes.has_value()) return;
  check_dim(*classes, 1, op, classes_arg);
  VISDET_CHECK(classes->size(0) == boxes.size(0), op, ": ", classes_arg,
               " must have shape [N] with N = ", boxes_arg, ".size(0) = ",
               boxes.size(0), ", got ", host::shape_of(*classes));
  check_integer(*classes, op, classes_arg);
  check_same_device(boxes, *classes, op, boxes_arg, classes_arg);
}

void check_nms_inputs(const char* op, const Tensor& boxes,
                      const Tensor& scores, const std::optional<Tensor>& idxs,
                      double iou_threshold, int64_t offset) {
  check_boxes(op, boxes, "boxes", 4, "[N, 4]");
  check_scores(op, boxes, "boxes", scores);
  VISDET_CHECK(offset == 0 || offset == 1, op,
               ": offset must be 0 or 1, got ", offset);
  check_threshold(op, iou_threshold);
  check_classes(op, boxes, "boxes", idxs, "idxs");
}

}  // namespace visdet_ops
