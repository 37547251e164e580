// deform_roi_pool under torch.autocast: input stays in its dtype (read
// directly by the kernels, sampled and accumulated in float32); rois go to
// the compute dtype (float32 beside a 16-bit input), never to 16 bits; offset
// (a [K, 2, PH, PW] fraction of the RoI size, small) goes to the input's
// dtype, which the kernels read it in. The output has the input's dtype; the
// offset gradient comes back in the offset's own dtype through the cast.
#include <ATen/OpMathType.h>

#include "common/autocast.h"

namespace visdet_ops {
namespace {

template <c10::DispatchKey kKey, c10::DeviceType kDevice>
at::Tensor deform_roi_pool_autocast(const at::Tensor& input,
                                    const at::Tensor& rois,
                                    const std::optional<at::Tensor>& offset,
                                    c10::SymInt pooled_height,
                                    c10::SymInt pooled_width,
                                    double spatial_scale,
                                    int64_t sampling_ratio, double gamma) {
  c10::impl::ExcludeDispatchKeyGuard no_autocast(kKey);
  static const auto op =
      find_op<at::Tensor(const at::Tensor&, const at::Tensor&,
                         const std::optional<at::Tensor>&, c10::SymInt,
                         c10::SymInt, double, int64_t, double)>(
          "visdet_ops::deform_roi_pool");
  const at::ScalarType dtype = input.scalar_type();
  return op.call(input, floating_to(at::toOpMathType(dtype), rois),
                 floating_to(dtype, offset), std::move(pooled_height),
                 std::move(pooled_width), spatial_scale, sampling_ratio, gamma);
}

}  // namespace

TORCH_LIBRARY_IMPL(visdet_ops, Autocast, m) {
  VISDET_AUTOCAST_IMPL(m, "deform_roi_pool", deform_roi_pool_autocast);
}

TORCH_LIBRARY_IMPL(visdet_ops, AutocastCPU, m) {
  VISDET_AUTOCAST_CPU_IMPL(m, "deform_roi_pool", deform_roi_pool_autocast);
}

}  // namespace visdet_ops
