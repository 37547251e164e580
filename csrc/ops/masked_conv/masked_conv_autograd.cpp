// masked_conv2d: autograd in C++ (a Python autograd formula costs tens to
// hundreds of microseconds per call). mmcv's masked_conv2d is not
// differentiable (its backward returns None); this one is: gradients flow to
// features, weight and bias from the active outputs only (the mask is a
// constant). The backward is its own op, _masked_conv2d_backward, so that
// torch.compile and fake tensors see it.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <optional>

namespace visdet_ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

at::Tensor call_forward(const at::Tensor& features, const at::Tensor& mask,
                        const at::Tensor& weight,
                        const std::optional<at::Tensor>& bias, int64_t pad_h,
                        int64_t pad_w) {
  static auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("visdet_ops::masked_conv2d", "")
          .typed<at::Tensor(const at::Tensor&, const at::Tensor&,
                            const at::Tensor&, const std::optional<at::Tensor>&,
                            int64_t, int64_t)>();
  return op.call(features, mask, weight, bias, pad_h, pad_w);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> call_backward(
    const at::Tensor& grad_output, const at::Tensor& features,
    const at::Tensor& mask, const at::Tensor& weight, int64_t pad_h,
    int64_t pad_w) {
  static auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("visdet_ops::_masked_conv2d_backward", "")
          .typed<std::tuple<at::Tensor, at::Tensor, at::Tensor>(
              const at::Tensor&, const at::Tensor&, const at::Tensor&,
              const at::Tensor&, int64_t, int64_t)>();
  return op.call(grad_output, features, mask, weight, pad_h, pad_w);
}

class MaskedConv2dFunction
    : public torch::autograd::Function<MaskedConv2dFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& features,
                               const at::Tensor& mask, const at::Tensor& weight,
                               const std::optional<at::Tensor>& bias,
                               int64_t pad_h, int64_t pad_w) {
    ctx->saved_data["pad_h"] = pad_h;
    ctx->saved_data["pad_w"] = pad_w;
    ctx->saved_data["has_bias"] = bias.has_value();
    ctx->save_for_backward({features, mask, weight});
    at::AutoDispatchBelowADInplaceOrView guard;
    return {call_forward(features, mask, weight, bias, pad_h, pad_w)};
  }

  static variable_list backward(AutogradContext* ctx,
                                const variable_list& grad_output) {
    const variable_list saved = ctx->get_saved_variables();
    auto [grad_features, grad_weight, grad_bias] =
        call_backward(grad_output[0], saved[0], saved[1], saved[2],
                      ctx->saved_data["pad_h"].toInt(),
                      ctx->saved_data["pad_w"].toInt());
    // One entry per forward argument: features, mask, weight, bias, pad_h,
    // pad_w.
    return {grad_features, at::Tensor(), grad_weight,
            ctx->saved_data["has_bias"].toBool() ? grad_bias : at::Tensor(),
            at::Tensor(), at::Tensor()};
  }
};

// Makes a double backward fail loudly instead of silently giving zeros.
class MaskedConv2dBackwardFunction
    : public torch::autograd::Function<MaskedConv2dBackwardFunction> {
 public:
  static variable_list forward(AutogradContext* /*ctx*/,
                               const at::Tensor& grad_output,
                               const at::Tensor& features,
                               const at::Tensor& mask, const at::Tensor& weight,
                               int64_t pad_h, int64_t pad_w) {
    at::AutoDispatchBelowADInplaceOrView guard;
    auto [a, b, c] =
        call_backward(grad_output, features, mask, weight, pad_h, pad_w);
    return {a, b, c};
  }

  static variable_list backward(AutogradContext* /*ctx*/,
                                const variable_list& /*grad_output*/) {
    TORCH_CHECK(false,
                "masked_conv2d: double backward (the gradient of the "
                "gradient) is not supported");
  }
};

at::Tensor masked_conv2d_autograd(const at::Tensor& features,
                                  const at::Tensor& mask,
                                  const at::Tensor& weight,
                                  const std::optional<at::Tensor>& bias,
                                  int64_t pad_h, int64_t pad_w) {
  return MaskedConv2dFunction::apply(features, mask, weight, bias, pad_h,
                                     pad_w)[0];
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> masked_conv2d_backward_autograd(
    const at::Tensor& grad_output, const at::Tensor& features,
    const at::Tensor& mask, const at::Tensor& weight, int64_t pad_h,
    int64_t pad_w) {
  const variable_list r = MaskedConv2dBackwardFunction::apply(
      grad_output, features, mask, weight, pad_h, pad_w);
  return {r[0], r[1], r[2]};
}

}  // namespace

TORCH_LIBRARY_IMPL(visdet_ops, Autograd, m) {
  m.impl("masked_conv2d", &masked_conv2d_autograd);
  m.impl("_masked_conv2d_backward", &masked_conv2d_backward_autograd);
}

}  // namespace visdet_ops
