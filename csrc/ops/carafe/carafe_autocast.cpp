// carafe / carafe_naive under torch.autocast: features keep their dtype (the
// kernels read float16/bfloat16 directly and accumulate in float32); masks go
// to the features' dtype, which the kernels read them in (softmax under
// autocast hands float32 masks to 16-bit features: the reassembly weights lie
// in [0, 1] and sum to 1, so 16 bits lose about 1e-3 relative per weight).
// The output has the features' dtype; the masks' gradient comes back in the
// masks' own dtype through the cast.
#include "common/autocast.h"

namespace visdet_ops {
namespace {

using CarafeSignature = at::Tensor(const at::Tensor&, const at::Tensor&,
                                   int64_t, int64_t, int64_t);

template <c10::DispatchKey kKey, c10::DeviceType kDevice>
at::Tensor carafe_autocast(const at::Tensor& features, const at::Tensor& masks,
                           int64_t kernel_size, int64_t group_size,
                           int64_t scale_factor) {
  c10::impl::ExcludeDispatchKeyGuard no_autocast(kKey);
  static const auto op = find_op<CarafeSignature>("visdet_ops::carafe");
  return op.call(features, floating_to(features.scalar_type(), masks),
                 kernel_size, group_size, scale_factor);
}

template <c10::DispatchKey kKey, c10::DeviceType kDevice>
at::Tensor carafe_naive_autocast(const at::Tensor& features,
                                 const at::Tensor& masks, int64_t kernel_size,
                                 int64_t group_size, int64_t scale_factor) {
  c10::impl::ExcludeDispatchKeyGuard no_autocast(kKey);
  static const auto op = find_op<CarafeSignature>("visdet_ops::carafe_naive");
  return op.call(features, floating_to(features.scalar_type(), masks),
                 kernel_size, group_size, scale_factor);
}

}  // namespace

TORCH_LIBRARY_IMPL(visdet_ops, Autocast, m) {
  VISDET_AUTOCAST_IMPL(m, "carafe", carafe_autocast);
  VISDET_AUTOCAST_IMPL(m, "carafe_naive", carafe_naive_autocast);
}

TORCH_LIBRARY_IMPL(visdet_ops, AutocastCPU, m) {
  VISDET_AUTOCAST_CPU_IMPL(m, "carafe", carafe_autocast);
  VISDET_AUTOCAST_CPU_IMPL(m, "carafe_naive", carafe_naive_autocast);
}

}  // namespace visdet_ops
