// bbox_overlaps under torch.autocast: both box sets go to float32 (float64
// stays float64): coordinates are never rounded to 16 bits, and an IoU near
// 0.5 keeps 24 bits rather than 11 or 8. The output is float32.
#include "common/autocast.h"

namespace visdet_ops {
namespace {

template <c10::DispatchKey kKey, c10::DeviceType kDevice>
at::Tensor bbox_overlaps_autocast(const at::Tensor& bboxes1,
                                  const at::Tensor& bboxes2, int64_t mode,
                                  bool aligned, int64_t offset, double eps) {
  c10::impl::ExcludeDispatchKeyGuard no_autocast(kKey);
  static const auto op =
      find_op<at::Tensor(const at::Tensor&, const at::Tensor&, int64_t, bool,
                         int64_t, double)>("visdet_ops::bbox_overlaps");
  return op.call(autocast_to(at::kFloat, bboxes1, kDevice),
                 autocast_to(at::kFloat, bboxes2, kDevice), mode, aligned,
                 offset, eps);
}

}  // namespace

TORCH_LIBRARY_IMPL(visdet_ops, Autocast, m) {
  VISDET_AUTOCAST_IMPL(m, "bbox_overlaps", bbox_overlaps_autocast);
}

TORCH_LIBRARY_IMPL(visdet_ops, AutocastCPU, m) {
  VISDET_AUTOCAST_CPU_IMPL(m, "bbox_overlaps", bbox_overlaps_autocast);
}

}  // namespace visdet_ops
