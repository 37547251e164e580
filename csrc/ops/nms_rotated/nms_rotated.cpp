// nms_rotated: schema, and the argument checks and prepare step shared by all
// devices. Each device registers from its own host file:
// nms_rotated_cpu_host.cpp and nms_rotated_cuda_host.cpp. One source for the
// classic and the stable build (common/host.h). Autocast is registered in
// visdet_ops/ops/nms_rotated.py; there is no autograd (index outputs).
#include <optional>

#include "common/checks.h"
#include "common/host.h"
#include "nms_rotated.h"
#include "ops/_boxes/boxes.h"
#include "ops/_rotated/rotated.h"

namespace visdet_ops {

using host::ScalarType;
using host::Tensor;

namespace {

constexpr const char* kOp = "nms_rotated";

}  // namespace

NmsRotatedPrepared nms_rotated_prepare(const Tensor& dets, const Tensor& scores,
                                       double iou_threshold,
                                       const std::optional<Tensor>& labels) {
  check_rotated_boxes(kOp, dets, "dets", "[N, 5]");
  check_scores(kOp, dets, "dets", scores);
  check_threshold(kOp, iou_threshold);
  check_classes(kOp, dets, "dets", labels, "labels");
  NmsRotatedPrepared p;
  p.n = dets.size(0);
  if (p.n == 0) return p;
  // Stable, so that equal scores keep input order on every device.
  p.order = host::sort_descending_stable_indices(scores);
  const ScalarType compute = host::dtype_of(dets) == ScalarType::Double
                                 ? ScalarType::Double
                                 : ScalarType::Float;
  p.boxes = host::contiguous(
      host::to_dtype(host::index_select(dets, 0, p.order), compute));
  if (labels.has_value()) {
    p.classes = host::contiguous(host::to_dtype(
        host::index_select(*labels, 0, p.order), ScalarType::Long));
    p.has_classes = true;
  }
  return p;
}

VISDET_LIBRARY_FRAGMENT(m) {
  // mmcv's nms_rotated: dets (x, y, w, h, angle in radians), IoU > threshold
  // suppresses; labels: boxes suppress only boxes with the same label;
  // clockwise=False: the angles are counter-clockwise. The kept input
  // indices, in descending score order (ties: lower index first).
  m.def(
      "nms_rotated(Tensor dets, Tensor scores, float iou_threshold, "
      "Tensor? labels=None, bool clockwise=True) -> Tensor");
}

}  // namespace visdet_ops
