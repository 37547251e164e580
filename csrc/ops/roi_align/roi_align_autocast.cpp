// roi_align under torch.autocast: input stays in its dtype (the kernels read
// float16/bfloat16 directly and sample in float32: no float32 copy of the
// feature map); rois go to the kernels' compute dtype (float32 beside a
// 16-bit or float32 input, float64 beside float64), never to 16 bits. The
// output has the input's dtype.
#include "common/autocast.h"
#include "common/rois.h"

namespace visdet_ops {
namespace {

using RoIAlignOutputs = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

template <c10::DispatchKey kKey, c10::DeviceType kDevice>
RoIAlignOutputs roi_align_autocast(const at::Tensor& input,
                                   const at::Tensor& rois,
                                   c10::SymInt pooled_height,
                                   c10::SymInt pooled_width,
                                   double spatial_scale, int64_t sampling_ratio,
                                   c10::string_view pool_mode, bool aligned) {
  c10::impl::ExcludeDispatchKeyGuard no_autocast(kKey);
  static const auto op =
      find_op<RoIAlignOutputs(const at::Tensor&, const at::Tensor&,
                              c10::SymInt, c10::SymInt, double, int64_t,
                              c10::string_view, bool)>("visdet_ops::roi_align");
  return op.call(input, floating_to(roi_compute_dtype(input.scalar_type()), rois),
                 std::move(pooled_height), std::move(pooled_width),
                 spatial_scale, sampling_ratio, pool_mode, aligned);
}

}  // namespace

TORCH_LIBRARY_IMPL(visdet_ops, Autocast, m) {
  VISDET_AUTOCAST_IMPL(m, "roi_align", roi_align_autocast);
}

TORCH_LIBRARY_IMPL(visdet_ops, AutocastCPU, m) {
  VISDET_AUTOCAST_CPU_IMPL(m, "roi_align", roi_align_autocast);
}

}  // namespace visdet_ops
