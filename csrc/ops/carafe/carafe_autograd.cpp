// carafe / carafe_naive: autograd in C++ (a Python autograd formula costs
// tens to hundreds of microseconds per call). Gradients flow to features and
// masks. Each backward is its own op (_carafe_backward,
// _carafe_naive_backward) so that torch.compile and fake tensors see it.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/library.h>

namespace visdet_ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

using ForwardOp = c10::TypedOperatorHandle<at::Tensor(
    const at::Tensor&, const at::Tensor&, int64_t, int64_t, int64_t)>;
using BackwardOp = c10::TypedOperatorHandle<std::tuple<at::Tensor, at::Tensor>(
    const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t, int64_t,
    int64_t)>;

struct CarafeOp {
  static constexpr const char* name = "carafe";
  static constexpr const char* forward = "visdet_ops::carafe";
  static constexpr const char* backward = "visdet_ops::_carafe_backward";
};
struct CarafeNaiveOp {
  static constexpr const char* name = "carafe_naive";
  static constexpr const char* forward = "visdet_ops::carafe_naive";
  static constexpr const char* backward = "visdet_ops::_carafe_naive_backward";
};

template <typename Op>
const ForwardOp& forward_op() {
  static const ForwardOp op = c10::Dispatcher::singleton()
                                  .findSchemaOrThrow(Op::forward, "")
                                  .template typed<at::Tensor(
                                      const at::Tensor&, const at::Tensor&,
                                      int64_t, int64_t, int64_t)>();
  return op;
}

template <typename Op>
const BackwardOp& backward_op() {
  static const BackwardOp op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow(Op::backward, "")
          .template typed<std::tuple<at::Tensor, at::Tensor>(
              const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t,
              int64_t, int64_t)>();
  return op;
}

template <typename Op>
class CarafeBackwardFunction
    : public torch::autograd::Function<CarafeBackwardFunction<Op>> {
 public:
  static variable_list forward(AutogradContext* /*ctx*/,
                               const at::Tensor& grad_output,
                               const at::Tensor& features,
                               const at::Tensor& masks, int64_t k, int64_t g,
                               int64_t s) {
    at::AutoDispatchBelowADInplaceOrView guard;
    auto [gf, gm] = backward_op<Op>().call(grad_output, features, masks, k, g, s);
    return {gf, gm};
  }

  // Makes a double backward fail loudly instead of silently giving zeros.
  static variable_list backward(AutogradContext* /*ctx*/,
                                const variable_list& /*grad_output*/) {
    TORCH_CHECK(false, Op::name,
                ": double backward (the gradient of the gradient) is not "
                "supported");
  }
};

template <typename Op>
class CarafeFunction : public torch::autograd::Function<CarafeFunction<Op>> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& features,
                               const at::Tensor& masks, int64_t k, int64_t g,
                               int64_t s) {
    ctx->saved_data["k"] = k;
    ctx->saved_data["g"] = g;
    ctx->saved_data["s"] = s;
    ctx->save_for_backward({features, masks});
    at::AutoDispatchBelowADInplaceOrView guard;
    return {forward_op<Op>().call(features, masks, k, g, s)};
  }

  static variable_list backward(AutogradContext* ctx,
                                const variable_list& grad_output) {
    const variable_list saved = ctx->get_saved_variables();
    auto [grad_features, grad_masks] = backward_op<Op>().call(
        grad_output[0], saved[0], saved[1], ctx->saved_data["k"].toInt(),
        ctx->saved_data["g"].toInt(), ctx->saved_data["s"].toInt());
    return {grad_features, grad_masks, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

template <typename Op>
at::Tensor carafe_autograd(const at::Tensor& features, const at::Tensor& masks,
                           int64_t k, int64_t g, int64_t s) {
  return CarafeFunction<Op>::apply(features, masks, k, g, s)[0];
}

template <typename Op>
std::tuple<at::Tensor, at::Tensor> carafe_backward_autograd(
    const at::Tensor& grad_output, const at::Tensor& features,
    const at::Tensor& masks, int64_t k, int64_t g, int64_t s) {
  const variable_list r = CarafeBackwardFunction<Op>::apply(
      grad_output, features, masks, k, g, s);
  return {r[0], r[1]};
}

}  // namespace

TORCH_LIBRARY_IMPL(visdet_ops, Autograd, m) {
  m.impl("carafe", &carafe_autograd<CarafeOp>);
  m.impl("_carafe_backward", &carafe_backward_autograd<CarafeOp>);
  m.impl("carafe_naive", &carafe_autograd<CarafeNaiveOp>);
  m.impl("_carafe_naive_backward", &carafe_backward_autograd<CarafeNaiveOp>);
}

}  // namespace visdet_ops
