// soft_nms under torch.autocast: boxes and scores go to float32 (float64
// stays float64): coordinates are never rounded to 16 bits, IoUs and score
// decay are computed in float32. Returns int64 indices and float32 scores.
#include "common/autocast.h"

namespace visdet_ops {
namespace {

template <c10::DispatchKey kKey, c10::DeviceType kDevice>
std::tuple<at::Tensor, at::Tensor> soft_nms_autocast(
    const at::Tensor& boxes, const at::Tensor& scores, double iou_threshold,
    double sigma, double min_score, int64_t method, int64_t offset,
    const std::optional<at::Tensor>& idxs) {
  c10::impl::ExcludeDispatchKeyGuard no_autocast(kKey);
  static const auto op =
      find_op<std::tuple<at::Tensor, at::Tensor>(
          const at::Tensor&, const at::Tensor&, double, double, double,
          int64_t, int64_t, const std::optional<at::Tensor>&)>(
          "visdet_ops::soft_nms");
  return op.call(autocast_to(at::kFloat, boxes, kDevice),
                 autocast_to(at::kFloat, scores, kDevice), iou_threshold, sigma,
                 min_score, method, offset, idxs);
}

}  // namespace

TORCH_LIBRARY_IMPL(visdet_ops, Autocast, m) {
  VISDET_AUTOCAST_IMPL(m, "soft_nms", soft_nms_autocast);
}

TORCH_LIBRARY_IMPL(visdet_ops, AutocastCPU, m) {
  VISDET_AUTOCAST_CPU_IMPL(m, "soft_nms", soft_nms_autocast);
}

}  // namespace visdet_ops
