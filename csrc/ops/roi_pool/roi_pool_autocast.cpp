// roi_pool under torch.autocast: input stays in its dtype (a max over input
// values: exact in any dtype, read directly by the kernels); rois go to the
// kernels' compute dtype (float32 beside a 16-bit or float32 input), never to
// 16 bits. The output has the input's dtype.
#include "common/autocast.h"
#include "common/rois.h"

namespace visdet_ops {
namespace {

using RoIPoolOutputs = std::tuple<at::Tensor, at::Tensor>;

template <c10::DispatchKey kKey, c10::DeviceType kDevice>
RoIPoolOutputs roi_pool_autocast(const at::Tensor& input,
                                 const at::Tensor& rois,
                                 c10::SymInt pooled_height,
                                 c10::SymInt pooled_width,
                                 double spatial_scale) {
  c10::impl::ExcludeDispatchKeyGuard no_autocast(kKey);
  static const auto op =
      find_op<RoIPoolOutputs(const at::Tensor&, const at::Tensor&, c10::SymInt,
                             c10::SymInt, double)>("visdet_ops::roi_pool");
  return op.call(input, floating_to(roi_compute_dtype(input.scalar_type()), rois),
                 std::move(pooled_height), std::move(pooled_width),
                 spatial_scale);
}

}  // namespace

TORCH_LIBRARY_IMPL(visdet_ops, Autocast, m) {
  VISDET_AUTOCAST_IMPL(m, "roi_pool", roi_pool_autocast);
}

TORCH_LIBRARY_IMPL(visdet_ops, AutocastCPU, m) {
  VISDET_AUTOCAST_CPU_IMPL(m, "roi_pool", roi_pool_autocast);
}

}  // namespace visdet_ops
