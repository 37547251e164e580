// sigmoid_focal_loss / softmax_focal_loss under torch.autocast: input and
// weight go to float32 (float64 stays float64), as torch's own losses
// (binary_cross_entropy_with_logits, nll_loss) run in float32 under autocast:
// log-probabilities of confident logits and the sum over many anchors need
// float32. The loss is float32; the input's gradient comes back in its own
// dtype through the cast.
#include "common/autocast.h"

namespace visdet_ops {
namespace {

using FocalSignature = at::Tensor(const at::Tensor&, const at::Tensor&, double,
                                  double, const std::optional<at::Tensor>&,
                                  c10::string_view);

template <c10::DispatchKey kKey, c10::DeviceType kDevice>
at::Tensor sigmoid_focal_loss_autocast(const at::Tensor& input,
                                       const at::Tensor& target, double gamma,
                                       double alpha,
                                       const std::optional<at::Tensor>& weight,
                                       c10::string_view reduction) {
  c10::impl::ExcludeDispatchKeyGuard no_autocast(kKey);
  static const auto op = find_op<FocalSignature>("visdet_ops::sigmoid_focal_loss");
  return op.call(autocast_to(at::kFloat, input, kDevice), target, gamma, alpha,
                 autocast_to(at::kFloat, weight, kDevice), reduction);
}

template <c10::DispatchKey kKey, c10::DeviceType kDevice>
at::Tensor softmax_focal_loss_autocast(const at::Tensor& input,
                                       const at::Tensor& target, double gamma,
                                       double alpha,
                                       const std::optional<at::Tensor>& weight,
                                       c10::string_view reduction) {
  c10::impl::ExcludeDispatchKeyGuard no_autocast(kKey);
  static const auto op = find_op<FocalSignature>("visdet_ops::softmax_focal_loss");
  return op.call(autocast_to(at::kFloat, input, kDevice), target, gamma, alpha,
                 autocast_to(at::kFloat, weight, kDevice), reduction);
}

}  // namespace

TORCH_LIBRARY_IMPL(visdet_ops, Autocast, m) {
  VISDET_AUTOCAST_IMPL(m, "sigmoid_focal_loss", sigmoid_focal_loss_autocast);
  VISDET_AUTOCAST_IMPL(m, "softmax_focal_loss", softmax_focal_loss_autocast);
}

TORCH_LIBRARY_IMPL(visdet_ops, AutocastCPU, m) {
  VISDET_AUTOCAST_CPU_IMPL(m, "sigmoid_focal_loss", sigmoid_focal_loss_autocast);
  VISDET_AUTOCAST_CPU_IMPL(m, "softmax_focal_loss", softmax_focal_loss_autocast);
}

}  // namespace visdet_ops
