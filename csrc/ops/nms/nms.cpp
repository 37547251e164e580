// NMS family: schemas, and the argument checks and prepare steps shared by all
// devices. Each device registers from its own host file: nms_cpu_host.cpp and
// nms_cuda_host.cpp. One source for the classic and the stable build
// (common/host.h). Autocast is registered in visdet_ops/ops/nms.py.
#include <optional>

#include "common/checks.h"
#include "common/host.h"
#include "nms.h"
#include "ops/_boxes/boxes.h"

namespace visdet_ops {

using host::ScalarType;
using host::Tensor;

ScalarType nms_compute_dtype(ScalarType dtype) {
  return dtype == ScalarType::Double ? ScalarType::Double : ScalarType::Float;
}

namespace {

// Stable, so that equal scores keep input order on every device.
Tensor sorted_order(const Tensor& scores) {
  return host::sort_descending_stable_indices(scores);
}

Tensor sorted_boxes(const Tensor& boxes, const Tensor& order) {
  return host::contiguous(
      host::to_dtype(host::index_select(boxes, 0, order),
                     nms_compute_dtype(host::dtype_of(boxes))));
}

}  // namespace

NmsPrepared nms_prepare(const char* op, const Tensor& boxes,
                        const Tensor& scores, const std::optional<Tensor>& idxs,
                        double iou_threshold, int64_t offset) {
  check_nms_inputs(op, boxes, scores, idxs, iou_threshold, offset);
  NmsPrepared p;
  p.n = boxes.size(0);
  if (p.n == 0) return p;
  p.order = sorted_order(scores);
  p.boxes = sorted_boxes(boxes, p.order);
  if (idxs.has_value()) {
    p.classes = host::contiguous(host::to_dtype(
        host::index_select(*idxs, 0, p.order), ScalarType::Long));
    p.has_classes = true;
  }
  return p;
}

NmsPrepared nms_match_prepare(const Tensor& dets, double iou_threshold) {
  constexpr const char* op = "nms_match";
  check_boxes(op, dets, "dets", 5, "[N, 5] (x1, y1, x2, y2, score)");
  check_threshold(op, iou_threshold);
  NmsPrepared p;
  p.n = dets.size(0);
  if (p.n == 0) return p;
  p.order = sorted_order(host::select(dets, 1, 4));
  p.boxes = sorted_boxes(host::narrow(dets, 1, 0, 4), p.order);
  return p;
}

Tensor nms_match_groups(const NmsPrepared& p, const Tensor& leader) {
  // out[order[i]] = order[leader[i]]: sorted positions -> input indices,
  // indexed by input index (order is a permutation: every slot is written).
  // Into zeros, not an empty tensor: the functional index_copy first copies
  // its `self`, and copying uninitialised memory is what compute-sanitizer's
  // initcheck reports (75 reports on the H200, run 19e).
  return host::index_copy(
      host::zeros({p.n}, host::dtype_of(leader), leader), 0, p.order,
      host::index_select(p.order, 0, leader));
}

VISDET_LIBRARY_FRAGMENT(m) {
  m.def(
      "nms(Tensor boxes, Tensor scores, float iou_threshold, int offset=0) "
      "-> Tensor");
  // Class-aware NMS: boxes suppress only boxes with the same idxs value.
  m.def(
      "batched_nms(Tensor boxes, Tensor scores, Tensor idxs, "
      "float iou_threshold, int offset=0) -> Tensor");
  // For every box (input index), the input index of its group's kept box.
  m.def("nms_match(Tensor dets, float iou_threshold) -> Tensor");
}

}  // namespace visdet_ops
