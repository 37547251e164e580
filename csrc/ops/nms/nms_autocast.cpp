// nms, batched_nms, nms_match under torch.autocast: boxes and scores go to
// float32 (float64 stays float64), as torchvision's nms autocast kernel does:
// box coordinates are never rounded to 16 bits, and IoUs are computed in
// float32 (the kernels' compute dtype for 16-bit boxes anyway). The outputs
// are int64 indices.
#include "common/autocast.h"

namespace visdet_ops {
namespace {

template <c10::DispatchKey kKey, c10::DeviceType kDevice>
at::Tensor nms_autocast(const at::Tensor& boxes, const at::Tensor& scores,
                        double iou_threshold, int64_t offset) {
  c10::impl::ExcludeDispatchKeyGuard no_autocast(kKey);
  static const auto op =
      find_op<at::Tensor(const at::Tensor&, const at::Tensor&, double,
                         int64_t)>("visdet_ops::nms");
  return op.call(autocast_to(at::kFloat, boxes, kDevice),
                 autocast_to(at::kFloat, scores, kDevice), iou_threshold,
                 offset);
}

template <c10::DispatchKey kKey, c10::DeviceType kDevice>
at::Tensor batched_nms_autocast(const at::Tensor& boxes,
                                const at::Tensor& scores,
                                const at::Tensor& idxs, double iou_threshold,
                                int64_t offset) {
  c10::impl::ExcludeDispatchKeyGuard no_autocast(kKey);
  static const auto op =
      find_op<at::Tensor(const at::Tensor&, const at::Tensor&,
                         const at::Tensor&, double, int64_t)>(
          "visdet_ops::batched_nms");
  return op.call(autocast_to(at::kFloat, boxes, kDevice),
                 autocast_to(at::kFloat, scores, kDevice), idxs, iou_threshold,
                 offset);
}

template <c10::DispatchKey kKey, c10::DeviceType kDevice>
at::Tensor nms_match_autocast(const at::Tensor& dets, double iou_threshold) {
  c10::impl::ExcludeDispatchKeyGuard no_autocast(kKey);
  static const auto op = find_op<at::Tensor(const at::Tensor&, double)>(
      "visdet_ops::nms_match");
  return op.call(autocast_to(at::kFloat, dets, kDevice), iou_threshold);
}

}  // namespace

TORCH_LIBRARY_IMPL(visdet_ops, Autocast, m) {
  VISDET_AUTOCAST_IMPL(m, "nms", nms_autocast);
  VISDET_AUTOCAST_IMPL(m, "batched_nms", batched_nms_autocast);
  VISDET_AUTOCAST_IMPL(m, "nms_match", nms_match_autocast);
}

TORCH_LIBRARY_IMPL(visdet_ops, AutocastCPU, m) {
  VISDET_AUTOCAST_CPU_IMPL(m, "nms", nms_autocast);
  VISDET_AUTOCAST_CPU_IMPL(m, "batched_nms", batched_nms_autocast);
  VISDET_AUTOCAST_CPU_IMPL(m, "nms_match", nms_match_autocast);
}

}  // namespace visdet_ops
