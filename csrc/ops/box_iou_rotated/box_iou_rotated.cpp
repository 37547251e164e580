// box_iou_rotated: schema, and the argument checks and prepare step shared by
// all devices. Each device registers from its own host file:
// box_iou_rotated_cpu_host.cpp and box_iou_rotated_cuda_host.cpp. One source
// for the classic and the stable build (common/host.h). Autocast is
// registered in visdet_ops/ops/box_iou_rotated.py; there is no autograd (mmcv
// has none).
#include <string>

#include "box_iou_rotated.h"
#include "box_iou_rotated_kernel.h"
#include "common/checks.h"
#include "common/host.h"
#include "ops/_rotated/rotated.h"

namespace visdet_ops {
namespace {

using host::ScalarType;
using host::Tensor;

constexpr const char* kOp = "box_iou_rotated";

int parse_mode(host::StringArg mode) {
  if (mode == "iou") return box_iou_rotated_detail::kIoU;
  if (mode == "iof") return box_iou_rotated_detail::kIoF;
  VISDET_CHECK(false, kOp, ": mode must be 'iou' or 'iof', got '",
               std::string(mode), "'");
  return -1;  // unreachable
}

}  // namespace

BoxIouRotatedPrepared box_iou_rotated_prepare(const Tensor& bboxes1,
                                              const Tensor& bboxes2,
                                              host::StringArg mode,
                                              bool aligned, bool clockwise,
                                              bool widen_16bit) {
  check_rotated_boxes(kOp, bboxes1, "bboxes1", "[M, 5]");
  check_rotated_boxes(kOp, bboxes2, "bboxes2", "[N, 5]");
  check_same_dtype(bboxes1, bboxes2, kOp, "bboxes1", "bboxes2");
  check_same_device(bboxes1, bboxes2, kOp, "bboxes1", "bboxes2");
  const int mode_value = parse_mode(mode);
  const int64_t rows = bboxes1.size(0);
  const int64_t cols = bboxes2.size(0);
  VISDET_CHECK(!aligned || rows == cols, kOp,
               ": aligned=True needs as many bboxes1 as bboxes2, got ", rows,
               " and ", cols);

  BoxIouRotatedPrepared p;
  p.dtype = host::dtype_of(bboxes1);
  p.shape = BoxIouRotatedShape{rows, cols, mode_value, aligned, clockwise};
  const ScalarType compute =
      widen_16bit ? host::compute_dtype(p.dtype) : p.dtype;
  p.output = aligned ? host::empty({rows}, compute, bboxes1)
                     : host::empty({rows, cols}, compute, bboxes1);
  p.boxes1 = host::contiguous(host::to_dtype(bboxes1, compute));
  p.boxes2 = host::contiguous(host::to_dtype(bboxes2, compute));
  return p;
}

Tensor BoxIouRotatedPrepared::result() const {
  return host::to_dtype(output, dtype);
}

VISDET_LIBRARY_FRAGMENT(m) {
  // mmcv's box_iou_rotated: boxes (x, y, w, h, angle in radians); mode "iou"
  // or "iof" (intersection over bboxes1's area); clockwise=False: the angles
  // are counter-clockwise.
  m.def(
      "box_iou_rotated(Tensor bboxes1, Tensor bboxes2, str mode=\"iou\", "
      "bool aligned=False, bool clockwise=True) -> Tensor");
}

}  // namespace visdet_ops
