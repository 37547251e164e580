// bbox_overlaps: schema, and the argument checks and prepare step shared by
// all devices. Each device registers from its own host file:
// bbox_overlaps_cpu_host.cpp and bbox_overlaps_cuda_host.cpp. One source for
// the classic and the stable build (common/host.h). Autograd and autocast are
// registered in visdet_ops/ops/bbox_overlaps.py.
#include <cmath>
#include <string>
#include <vector>

#include "bbox_overlaps.h"
#include "bbox_overlaps_kernel.h"
#include "common/checks.h"
#include "common/host.h"

namespace visdet_ops {
namespace {

using host::ScalarType;
using host::Tensor;

constexpr const char* kOp = "bbox_overlaps";

int parse_mode(host::StringArg mode) {
  if (mode == "iou") return bbox_overlaps_detail::kIoU;
  if (mode == "iof") return bbox_overlaps_detail::kIoF;
  if (mode == "giou") return bbox_overlaps_detail::kGIoU;
  VISDET_CHECK(false, kOp, ": mode must be 'iou', 'iof' or 'giou', got '",
               std::string(mode), "'");
  return -1;  // unreachable
}

// The leading (batch) dimensions of a [..., M, 4] tensor are equal.
bool same_batch_dims(const Tensor& a, const Tensor& b) {
  if (a.dim() != b.dim()) return false;
  for (int64_t d = 0; d < a.dim() - 2; ++d) {
    if (a.size(d) != b.size(d)) return false;
  }
  return true;
}

}  // namespace

BboxOverlapsPrepared bbox_overlaps_prepare(const Tensor& bboxes1,
                                           const Tensor& bboxes2,
                                           host::StringArg mode, bool aligned,
                                           int64_t offset, double eps,
                                           bool widen_16bit) {
  VISDET_CHECK(bboxes1.dim() >= 2 && bboxes1.size(-1) == 4, kOp,
               ": bboxes1 must have shape [..., M, 4], got ",
               host::shape_of(bboxes1));
  VISDET_CHECK(bboxes2.dim() >= 2 && bboxes2.size(-1) == 4, kOp,
               ": bboxes2 must have shape [..., N, 4], got ",
               host::shape_of(bboxes2));
  VISDET_CHECK(same_batch_dims(bboxes1, bboxes2), kOp,
               ": bboxes1 and bboxes2 must have the same batch dimensions, "
               "got ",
               host::shape_of(bboxes1), " and ", host::shape_of(bboxes2));
  check_floating(bboxes1, kOp, "bboxes1");
  check_same_dtype(bboxes1, bboxes2, kOp, "bboxes1", "bboxes2");
  check_same_device(bboxes1, bboxes2, kOp, "bboxes1", "bboxes2");
  const int mode_value = parse_mode(mode);
  VISDET_CHECK(offset == 0 || offset == 1, kOp,
               ": offset must be 0 or 1, got ", offset);
  // 0 is allowed (mmdet's formula then gives NaN for 0 / 0, as mmdet does).
  VISDET_CHECK(std::isfinite(eps) && eps >= 0, kOp,
               ": eps must be a finite number >= 0, got ", eps);
  const int64_t rows = bboxes1.size(-2);
  const int64_t cols = bboxes2.size(-2);
  VISDET_CHECK(!aligned || rows == cols, kOp,
               ": aligned=True needs as many bboxes1 as bboxes2, got ", rows,
               " and ", cols);

  BboxOverlapsPrepared p;
  p.dtype = host::dtype_of(bboxes1);
  std::vector<int64_t> out_sizes;
  int64_t batch = 1;
  for (int64_t d = 0; d < bboxes1.dim() - 2; ++d) {
    batch *= bboxes1.size(d);
    out_sizes.push_back(bboxes1.size(d));
  }
  out_sizes.push_back(rows);
  if (!aligned) out_sizes.push_back(cols);
  p.shape = BboxOverlapsShape{batch, rows, cols, mode_value, aligned};
  const ScalarType compute =
      widen_16bit ? host::compute_dtype(p.dtype) : p.dtype;
  p.output = host::empty_of_sizes(out_sizes, compute, bboxes1);
  p.boxes1 = host::contiguous(host::to_dtype(bboxes1, compute));
  p.boxes2 = host::contiguous(host::to_dtype(bboxes2, compute));
  return p;
}

Tensor BboxOverlapsPrepared::result() const {
  return host::to_dtype(output, dtype);
}

VISDET_LIBRARY_FRAGMENT(m) {
  // mode: "iou", "iof" or "giou". eps: mmdet's (see bbox_overlaps_kernel.h).
  m.def(
      "bbox_overlaps(Tensor bboxes1, Tensor bboxes2, str mode=\"iou\", "
      "bool aligned=False, int offset=0, float eps=1e-6) -> Tensor");
}

}  // namespace visdet_ops
