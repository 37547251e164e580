// nms: schema, argument checks shared by all devices, CPU registration.
#include <ATen/ATen.h>
#include <torch/library.h>

#include "common/checks.h"
#include "nms.h"
#include "nms_launch.h"

namespace visdet_ops {

void nms_check_inputs(const at::Tensor& boxes, const at::Tensor& scores,
                      double iou_threshold, int64_t offset) {
  constexpr const char* op = "nms";
  check_dim(boxes, 2, op, "boxes");
  check_size(boxes, 1, 4, op, "boxes", "[N, 4]");
  check_dim(scores, 1, op, "scores");
  TORCH_CHECK(scores.size(0) == boxes.size(0), op,
              ": scores must have shape [N] with N = boxes.size(0) = ",
              boxes.size(0), ", got ", scores.sizes());
  check_floating(boxes, op, "boxes");
  check_same_dtype(boxes, scores, op, "boxes", "scores");
  check_same_device(boxes, scores, op, "boxes", "scores");
  TORCH_CHECK(offset == 0 || offset == 1, op,
              ": offset must be 0 or 1, got ", offset);
  TORCH_CHECK(!std::isnan(iou_threshold), op,
              ": iou_threshold must be a number, got nan");
}

at::Tensor nms_sorted_order(const at::Tensor& scores) {
  // Stable, so that equal scores keep input order on every device.
  return std::get<1>(scores.sort(/*stable=*/true, /*dim=*/0,
                                 /*descending=*/true));
}

namespace {

at::Tensor nms_cpu_kernel(const at::Tensor& boxes, const at::Tensor& scores,
                          double iou_threshold, int64_t offset) {
  nms_check_inputs(boxes, scores, iou_threshold, offset);
  TORCH_CHECK(boxes.device().is_cpu(), "nms: the CPU kernel needs CPU tensors, got boxes on ",
              boxes.device());
  const int64_t n = boxes.size(0);
  if (n == 0) return at::empty({0}, boxes.options().dtype(at::kLong));
  const at::Tensor order = nms_sorted_order(scores);
  const at::Tensor boxes_sorted = boxes.index_select(0, order).contiguous();
  at::Tensor keep = at::empty({n}, boxes.options().dtype(at::kByte));
  AT_DISPATCH_FLOATING_TYPES(boxes.scalar_type(), "nms_cpu", [&] {
    nms_cpu<scalar_t>(boxes_sorted.data_ptr<scalar_t>(), n,
                      static_cast<scalar_t>(iou_threshold),
                      static_cast<scalar_t>(offset), keep.data_ptr<uint8_t>());
  });
  return order.masked_select(keep.to(at::kBool));
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(visdet_ops, m) {
  m.def(
      "nms(Tensor boxes, Tensor scores, float iou_threshold, int offset=0) "
      "-> Tensor");
}

TORCH_LIBRARY_IMPL(visdet_ops, CPU, m) {
  m.impl("nms", &nms_cpu_kernel);
}

}  // namespace visdet_ops
