// masked_conv2d under torch.autocast: like a convolution: features, weight
// and bias go to the autocast dtype (float16/bfloat16; float64 left alone),
// the GEMM accumulates in float32, the output has the autocast dtype. mask
// only selects positions (mask > 0) and keeps its dtype.
#include "common/autocast.h"

namespace visdet_ops {
namespace {

template <c10::DispatchKey kKey, c10::DeviceType kDevice>
at::Tensor masked_conv2d_autocast(const at::Tensor& features,
                                  const at::Tensor& mask,
                                  const at::Tensor& weight,
                                  const std::optional<at::Tensor>& bias,
                                  int64_t pad_h, int64_t pad_w) {
  c10::impl::ExcludeDispatchKeyGuard no_autocast(kKey);
  static const auto op =
      find_op<at::Tensor(const at::Tensor&, const at::Tensor&,
                         const at::Tensor&, const std::optional<at::Tensor>&,
                         int64_t, int64_t)>("visdet_ops::masked_conv2d");
  const at::ScalarType to = autocast_dtype(kDevice);
  return op.call(autocast_to(to, features, kDevice), mask,
                 autocast_to(to, weight, kDevice), autocast_to(to, bias, kDevice),
                 pad_h, pad_w);
}

}  // namespace

TORCH_LIBRARY_IMPL(visdet_ops, Autocast, m) {
  VISDET_AUTOCAST_IMPL(m, "masked_conv2d", masked_conv2d_autocast);
}

TORCH_LIBRARY_IMPL(visdet_ops, AutocastCPU, m) {
  VISDET_AUTOCAST_CPU_IMPL(m, "masked_conv2d", masked_conv2d_autocast);
}

}  // namespace visdet_ops
