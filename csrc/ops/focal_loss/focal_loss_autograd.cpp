// Autograd of sigmoid_focal_loss / softmax_focal_loss in C++ (as torchvision
// does for its ops): a Python torch.library.register_autograd costs tens to
// hundreds of microseconds per call, more than these kernels take.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <string>

#include "focal_loss.h"

namespace visdet_ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

using ForwardSchema = at::Tensor(const at::Tensor&, const at::Tensor&, double,
                                 double, const std::optional<at::Tensor>&,
                                 c10::string_view);
using BackwardSchema = at::Tensor(const at::Tensor&, const at::Tensor&,
                                  const at::Tensor&, double, double,
                                  const std::optional<at::Tensor>&,
                                  c10::string_view);

struct SigmoidOps {
  static constexpr FocalKind kind = FocalKind::kSigmoid;
  static constexpr const char* forward = "visdet_ops::sigmoid_focal_loss";
  static constexpr const char* backward =
      "visdet_ops::_sigmoid_focal_loss_backward";
};

struct SoftmaxOps {
  static constexpr FocalKind kind = FocalKind::kSoftmax;
  static constexpr const char* forward = "visdet_ops::softmax_focal_loss";
  static constexpr const char* backward =
      "visdet_ops::_softmax_focal_loss_backward";
};

template <typename Ops>
at::Tensor call_forward(const at::Tensor& input, const at::Tensor& target,
                        double gamma, double alpha,
                        const std::optional<at::Tensor>& weight,
                        c10::string_view reduction) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow(Ops::forward, "")
                             .template typed<ForwardSchema>();
  return op.call(input, target, gamma, alpha, weight, reduction);
}

template <typename Ops>
at::Tensor call_backward(const at::Tensor& grad_output, const at::Tensor& input,
                         const at::Tensor& target, double gamma, double alpha,
                         const std::optional<at::Tensor>& weight,
                         c10::string_view reduction) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow(Ops::backward, "")
                             .template typed<BackwardSchema>();
  return op.call(grad_output, input, target, gamma, alpha, weight, reduction);
}

std::optional<at::Tensor> optional_of(const at::Tensor& t) {
  return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt;
}

template <typename Ops>
class FocalLossFunction
    : public torch::autograd::Function<FocalLossFunction<Ops>> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& input,
                               const at::Tensor& target, double gamma,
                               double alpha,
                               const std::optional<at::Tensor>& weight,
                               c10::string_view reduction) {
    at::Tensor output;
    {
      at::AutoDispatchBelowADInplaceOrView guard;
      output = call_forward<Ops>(input, target, gamma, alpha, weight,
                                 reduction);
    }
    ctx->save_for_backward(
        {input, target, weight.has_value() ? *weight : at::Tensor()});
    ctx->saved_data["gamma"] = gamma;
    ctx->saved_data["alpha"] = alpha;
    ctx->saved_data["reduction"] = std::string(reduction);
    return {output};
  }

  static variable_list backward(AutogradContext* ctx,
                                const variable_list& grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    const std::string reduction = ctx->saved_data["reduction"].toStringRef();
    at::Tensor grad_input = call_backward<Ops>(
        grad_outputs[0], saved[0], saved[1],
        ctx->saved_data["gamma"].toDouble(),
        ctx->saved_data["alpha"].toDouble(), optional_of(saved[2]),
        reduction);
    // input, target, gamma, alpha, weight, reduction
    return {grad_input,   at::Tensor(), at::Tensor(),
            at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// The backward ops are differentiable once (their output is a gradient) and
// say so when asked for a second derivative.
template <typename Ops>
class FocalLossBackwardFunction
    : public torch::autograd::Function<FocalLossBackwardFunction<Ops>> {
 public:
  static variable_list forward(AutogradContext* /*ctx*/,
                               const at::Tensor& grad_output,
                               const at::Tensor& input,
                               const at::Tensor& target, double gamma,
                               double alpha,
                               const std::optional<at::Tensor>& weight,
                               c10::string_view reduction) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return {call_backward<Ops>(grad_output, input, target, gamma, alpha, weight,
                               reduction)};
  }

  static variable_list backward(AutogradContext* /*ctx*/,
                                const variable_list& /*grad_outputs*/) {
    TORCH_CHECK(false, focal_loss_op_name(Ops::kind),
                ": double backward (a gradient of the gradient) is not "
                "supported");
  }
};

template <typename Ops>
at::Tensor focal_loss_autograd(const at::Tensor& input,
                               const at::Tensor& target, double gamma,
                               double alpha,
                               const std::optional<at::Tensor>& weight,
                               c10::string_view reduction) {
  // As in mmcv the per-class weight is a constant; a weight that asks for a
  // gradient would silently get none.
  TORCH_CHECK(!(weight.has_value() && weight->defined() &&
                weight->requires_grad() && at::GradMode::is_enabled()),
              focal_loss_op_name(Ops::kind),
              ": weight does not support gradients (it is a per-class "
              "constant, as in mmcv); pass weight.detach()");
  return FocalLossFunction<Ops>::apply(input, target, gamma, alpha, weight,
                                       reduction)[0];
}

template <typename Ops>
at::Tensor focal_loss_backward_autograd(
    const at::Tensor& grad_output, const at::Tensor& input,
    const at::Tensor& target, double gamma, double alpha,
    const std::optional<at::Tensor>& weight, c10::string_view reduction) {
  return FocalLossBackwardFunction<Ops>::apply(grad_output, input, target,
                                               gamma, alpha, weight,
                                               reduction)[0];
}

}  // namespace

TORCH_LIBRARY_IMPL(visdet_ops, Autograd, m) {
  m.impl("sigmoid_focal_loss", &focal_loss_autograd<SigmoidOps>);
  m.impl("_sigmoid_focal_loss_backward",
         &focal_loss_backward_autograd<SigmoidOps>);
  m.impl("softmax_focal_loss", &focal_loss_autograd<SoftmaxOps>);
  m.impl("_softmax_focal_loss_backward",
         &focal_loss_backward_autograd<SoftmaxOps>);
}

}  // namespace visdet_ops
