// bbox_overlaps: schema, argument checks shared by all devices, CPU
// registration.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <cmath>

#include "bbox_overlaps.h"
#include "bbox_overlaps_kernel.h"
#include "common/checks.h"

namespace visdet_ops {

BboxOverlapsPrepared bbox_overlaps_prepare(const at::Tensor& bboxes1,
                                           const at::Tensor& bboxes2,
                                           int64_t mode, bool aligned,
                                           int64_t offset, double eps) {
  constexpr const char* op = "bbox_overlaps";
  TORCH_CHECK(bboxes1.dim() >= 2 && bboxes1.size(-1) == 4, op,
              ": bboxes1 must have shape [..., M, 4], got ", bboxes1.sizes());
  TORCH_CHECK(bboxes2.dim() >= 2 && bboxes2.size(-1) == 4, op,
              ": bboxes2 must have shape [..., N, 4], got ", bboxes2.sizes());
  TORCH_CHECK(bboxes1.dim() == bboxes2.dim() &&
                  bboxes1.sizes().slice(0, bboxes1.dim() - 2) ==
                      bboxes2.sizes().slice(0, bboxes2.dim() - 2),
              op,
              ": bboxes1 and bboxes2 must have the same batch dimensions, got ",
              bboxes1.sizes(), " and ", bboxes2.sizes());
  check_floating(bboxes1, op, "bboxes1");
  check_same_dtype(bboxes1, bboxes2, op, "bboxes1", "bboxes2");
  check_same_device(bboxes1, bboxes2, op, "bboxes1", "bboxes2");
  TORCH_CHECK(mode == bbox_overlaps_detail::kIoU ||
                  mode == bbox_overlaps_detail::kIoF ||
                  mode == bbox_overlaps_detail::kGIoU,
              op, ": mode must be 0 (iou), 1 (iof) or 2 (giou), got ", mode);
  TORCH_CHECK(offset == 0 || offset == 1, op,
              ": offset must be 0 or 1, got ", offset);
  // 0 is allowed (mmdet's formula then gives NaN for 0 / 0, as mmdet does).
  TORCH_CHECK(std::isfinite(eps) && eps >= 0, op,
              ": eps must be a finite number >= 0, got ", eps);
  const int64_t rows = bboxes1.size(-2);
  const int64_t cols = bboxes2.size(-2);
  TORCH_CHECK(!aligned || rows == cols, op,
              ": aligned=True needs as many bboxes1 as bboxes2, got ", rows,
              " and ", cols);

  BboxOverlapsPrepared p;
  const auto batch_sizes = bboxes1.sizes().slice(0, bboxes1.dim() - 2);
  int64_t batch = 1;
  for (const int64_t s : batch_sizes) batch *= s;
  p.shape = BboxOverlapsShape{batch, rows, cols,
                              static_cast<int>(mode), aligned};
  std::vector<int64_t> out_sizes(batch_sizes.begin(), batch_sizes.end());
  out_sizes.push_back(rows);
  if (!aligned) out_sizes.push_back(cols);
  p.output = at::empty(out_sizes, bboxes1.options());
  p.boxes1 = bboxes1.contiguous();
  p.boxes2 = bboxes2.contiguous();
  return p;
}

namespace {

at::Tensor bbox_overlaps_cpu_kernel(const at::Tensor& bboxes1,
                                    const at::Tensor& bboxes2, int64_t mode,
                                    bool aligned, int64_t offset,
                                    double eps) {
  TORCH_CHECK(bboxes1.device().is_cpu(),
              "bbox_overlaps: the CPU kernel needs CPU tensors, got bboxes1 on ",
              bboxes1.device());
  BboxOverlapsPrepared p =
      bbox_overlaps_prepare(bboxes1, bboxes2, mode, aligned, offset, eps);
  if (p.output.numel() == 0) return p.output;
  // float16 / bfloat16: computed in float32 on the CPU.
  const bool reduced = p.output.scalar_type() != at::kFloat &&
                       p.output.scalar_type() != at::kDouble;
  const at::Tensor b1 = reduced ? p.boxes1.to(at::kFloat) : p.boxes1;
  const at::Tensor b2 = reduced ? p.boxes2.to(at::kFloat) : p.boxes2;
  at::Tensor out = reduced ? at::empty(p.output.sizes(), b1.options()) : p.output;
  const BboxOverlapsShape shape = p.shape;
  // Grain: about 16k pair evaluations per task.
  const int64_t per_row = shape.aligned ? 1 : std::max<int64_t>(shape.cols, 1);
  const int64_t grain = std::max<int64_t>(1, 16384 / per_row);
  AT_DISPATCH_FLOATING_TYPES(b1.scalar_type(), "bbox_overlaps_cpu", [&] {
    const scalar_t* d1 = b1.data_ptr<scalar_t>();
    const scalar_t* d2 = b2.data_ptr<scalar_t>();
    scalar_t* o = out.data_ptr<scalar_t>();
    at::parallel_for(0, shape.batch * shape.rows, grain,
                     [&](int64_t begin, int64_t end) {
                       bbox_overlaps_cpu<scalar_t>(
                           d1, d2, shape, static_cast<scalar_t>(offset),
                           static_cast<scalar_t>(eps), begin, end, o);
                     });
  });
  if (reduced) p.output.copy_(out);
  return p.output;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(visdet_ops, m) {
  // mode: 0 iou, 1 iof, 2 giou. eps: mmdet's (see bbox_overlaps_kernel.h).
  m.def(
      "bbox_overlaps(Tensor bboxes1, Tensor bboxes2, int mode=0, "
      "bool aligned=False, int offset=0, float eps=1e-6) -> Tensor");
}

TORCH_LIBRARY_IMPL(visdet_ops, CPU, m) {
  m.impl("bbox_overlaps", &bbox_overlaps_cpu_kernel);
}

}  // namespace visdet_ops
