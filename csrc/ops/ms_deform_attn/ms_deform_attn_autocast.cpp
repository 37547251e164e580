// multi_scale_deformable_attn under torch.autocast: value keeps its dtype (the
// kernels read float16/bfloat16 directly: no float32 copy of the value
// tensor); sampling_locations and attention_weights go to value's compute
// dtype (float32 beside 16-bit value), which the kernels read them in, so a
// location is never rounded to 16 bits. Sampling and accumulation are float32;
// the output has value's dtype, each gradient its argument's dtype.
#include <ATen/OpMathType.h>

#include "common/autocast.h"

namespace visdet_ops {
namespace {

template <c10::DispatchKey kKey, c10::DeviceType kDevice>
at::Tensor msda_autocast(const at::Tensor& value,
                         const at::Tensor& value_spatial_shapes,
                         const at::Tensor& value_level_start_index,
                         const at::Tensor& sampling_locations,
                         const at::Tensor& attention_weights,
                         int64_t im2col_step) {
  c10::impl::ExcludeDispatchKeyGuard no_autocast(kKey);
  static const auto op =
      find_op<at::Tensor(const at::Tensor&, const at::Tensor&,
                         const at::Tensor&, const at::Tensor&,
                         const at::Tensor&, int64_t)>(
          "visdet_ops::multi_scale_deformable_attn");
  const at::ScalarType compute = at::toOpMathType(value.scalar_type());
  return op.call(value, value_spatial_shapes, value_level_start_index,
                 floating_to(compute, sampling_locations),
                 floating_to(compute, attention_weights), im2col_step);
}

}  // namespace

TORCH_LIBRARY_IMPL(visdet_ops, Autocast, m) {
  VISDET_AUTOCAST_IMPL(m, "multi_scale_deformable_attn", msda_autocast);
}

TORCH_LIBRARY_IMPL(visdet_ops, AutocastCPU, m) {
  VISDET_AUTOCAST_CPU_IMPL(m, "multi_scale_deformable_attn", msda_autocast);
}

}  // namespace visdet_ops
