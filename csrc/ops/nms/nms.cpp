// NMS family: schemas, argument checks shared by all devices, CPU registration.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <cmath>

#include "common/checks.h"
#include "nms.h"
#include "nms_launch.h"

namespace visdet_ops {

at::ScalarType nms_compute_dtype(at::ScalarType dtype) {
  return dtype == at::kDouble ? at::kDouble : at::kFloat;
}

namespace {

void check_boxes(const char* op, const at::Tensor& boxes, const char* arg,
                 int64_t columns, const char* shape) {
  check_dim(boxes, 2, op, arg);
  check_size(boxes, 1, columns, op, arg, shape);
  check_floating(boxes, op, arg);
}

void check_threshold(const char* op, double iou_threshold) {
  TORCH_CHECK(!std::isnan(iou_threshold), op,
              ": iou_threshold must be a number, got nan");
}

at::Tensor sorted_order(const at::Tensor& scores) {
  // Stable, so that equal scores keep input order on every device.
  return std::get<1>(scores.sort(/*stable=*/true, /*dim=*/0,
                                 /*descending=*/true));
}

at::Tensor sorted_boxes(const at::Tensor& boxes, const at::Tensor& order) {
  return boxes.index_select(0, order)
      .to(nms_compute_dtype(boxes.scalar_type()))
      .contiguous();
}

}  // namespace

void check_nms_inputs(const char* op, const at::Tensor& boxes,
                      const at::Tensor& scores,
                      const c10::optional<at::Tensor>& idxs,
                      double iou_threshold, int64_t offset) {
  check_boxes(op, boxes, "boxes", 4, "[N, 4]");
  check_dim(scores, 1, op, "scores");
  TORCH_CHECK(scores.size(0) == boxes.size(0), op,
              ": scores must have shape [N] with N = boxes.size(0) = ",
              boxes.size(0), ", got ", scores.sizes());
  // scores only order the boxes (and soft_nms decays them in the compute
  // dtype), so they may differ in dtype from the boxes: float32 boxes beside
  // 16-bit scores is what an AMP step produces.
  check_floating(scores, op, "scores");
  check_same_device(boxes, scores, op, "boxes", "scores");
  TORCH_CHECK(offset == 0 || offset == 1, op,
              ": offset must be 0 or 1, got ", offset);
  check_threshold(op, iou_threshold);
  if (idxs.has_value()) {
    const at::Tensor& classes = *idxs;
    check_dim(classes, 1, op, "idxs");
    TORCH_CHECK(classes.size(0) == boxes.size(0), op,
                ": idxs must have shape [N] with N = boxes.size(0) = ",
                boxes.size(0), ", got ", classes.sizes());
    check_integer(classes, op, "idxs");
    check_same_device(boxes, classes, op, "boxes", "idxs");
  }
}

NmsPrepared nms_prepare(const char* op, const at::Tensor& boxes,
                        const at::Tensor& scores,
                        const c10::optional<at::Tensor>& idxs,
                        double iou_threshold, int64_t offset) {
  check_nms_inputs(op, boxes, scores, idxs, iou_threshold, offset);
  NmsPrepared p;
  p.n = boxes.size(0);
  if (p.n == 0) return p;
  p.order = sorted_order(scores);
  p.boxes = sorted_boxes(boxes, p.order);
  if (idxs.has_value()) {
    p.classes = idxs->index_select(0, p.order).to(at::kLong).contiguous();
  }
  return p;
}

NmsPrepared nms_match_prepare(const at::Tensor& dets, double iou_threshold) {
  constexpr const char* op = "nms_match";
  check_boxes(op, dets, "dets", 5, "[N, 5] (x1, y1, x2, y2, score)");
  check_threshold(op, iou_threshold);
  NmsPrepared p;
  p.n = dets.size(0);
  if (p.n == 0) return p;
  p.order = sorted_order(dets.select(1, 4));
  p.boxes = sorted_boxes(dets.narrow(1, 0, 4), p.order);
  return p;
}

namespace {

at::Tensor nms_cpu_impl(const char* op, const at::Tensor& boxes,
                        const at::Tensor& scores,
                        const c10::optional<at::Tensor>& idxs,
                        double iou_threshold, int64_t offset) {
  const NmsPrepared p =
      nms_prepare(op, boxes, scores, idxs, iou_threshold, offset);
  TORCH_CHECK(boxes.device().is_cpu(), op,
              ": the CPU kernel needs CPU tensors, got boxes on ",
              boxes.device());
  if (p.n == 0) return at::empty({0}, boxes.options().dtype(at::kLong));
  at::Tensor keep = at::empty({p.n}, boxes.options().dtype(at::kByte));
  AT_DISPATCH_FLOATING_TYPES(p.boxes.scalar_type(), "nms_cpu", [&] {
    nms_cpu<scalar_t>(
        p.boxes.data_ptr<scalar_t>(),
        p.classes.defined() ? p.classes.data_ptr<int64_t>() : nullptr, p.n,
        static_cast<scalar_t>(iou_threshold), static_cast<scalar_t>(offset),
        keep.data_ptr<uint8_t>());
  });
  return p.order.masked_select(keep.to(at::kBool));
}

at::Tensor nms_cpu_kernel(const at::Tensor& boxes, const at::Tensor& scores,
                          double iou_threshold, int64_t offset) {
  return nms_cpu_impl("nms", boxes, scores, c10::nullopt, iou_threshold,
                      offset);
}

at::Tensor batched_nms_cpu_kernel(const at::Tensor& boxes,
                                  const at::Tensor& scores,
                                  const at::Tensor& idxs, double iou_threshold,
                                  int64_t offset) {
  return nms_cpu_impl("batched_nms", boxes, scores, idxs, iou_threshold,
                      offset);
}

at::Tensor nms_match_cpu_kernel(const at::Tensor& dets, double iou_threshold) {
  const NmsPrepared p = nms_match_prepare(dets, iou_threshold);
  TORCH_CHECK(dets.device().is_cpu(),
              "nms_match: the CPU kernel needs CPU tensors, got dets on ",
              dets.device());
  if (p.n == 0) return at::empty({0}, dets.options().dtype(at::kLong));
  at::Tensor leader = at::empty({p.n}, dets.options().dtype(at::kLong));
  AT_DISPATCH_FLOATING_TYPES(p.boxes.scalar_type(), "nms_match_cpu", [&] {
    nms_match_cpu<scalar_t>(p.boxes.data_ptr<scalar_t>(), p.n,
                            static_cast<scalar_t>(iou_threshold),
                            leader.data_ptr<int64_t>());
  });
  // Sorted positions -> input indices, indexed by input index.
  at::Tensor out = at::empty_like(leader);
  out.index_put_({p.order}, p.order.index_select(0, leader));
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(visdet_ops, m) {
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

TORCH_LIBRARY_IMPL(visdet_ops, CPU, m) {
  m.impl("nms", &nms_cpu_kernel);
  m.impl("batched_nms", &batched_nms_cpu_kernel);
  m.impl("nms_match", &nms_match_cpu_kernel);
}

}  // namespace visdet_ops
