// corner_pool: autograd in C++ (as torchvision does for roi_align; a Python
// autograd formula costs tens to hundreds of microseconds per call). The
// backward is its own op, _corner_pool_backward, so that torch.compile and
// fake tensors see it. It rescans the saved input instead of saving argmax
// indices: no int64 tensor the size of the input is kept alive.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <string>

namespace visdet_ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

at::Tensor call_forward(const at::Tensor& input, c10::string_view mode) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("visdet_ops::corner_pool", "")
                       .typed<at::Tensor(const at::Tensor&, c10::string_view)>();
  return op.call(input, mode);
}

at::Tensor call_backward(const at::Tensor& grad_output, const at::Tensor& input,
                         c10::string_view mode) {
  static auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("visdet_ops::_corner_pool_backward", "")
          .typed<at::Tensor(const at::Tensor&, const at::Tensor&,
                            c10::string_view)>();
  return op.call(grad_output, input, mode);
}

class CornerPoolFunction : public torch::autograd::Function<CornerPoolFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& input,
                               c10::string_view mode) {
    ctx->saved_data["mode"] = std::string(mode);
    ctx->save_for_backward({input});
    at::AutoDispatchBelowADInplaceOrView guard;
    return {call_forward(input, mode)};
  }

  static variable_list backward(AutogradContext* ctx,
                                const variable_list& grad_output) {
    const variable_list saved = ctx->get_saved_variables();
    const std::string mode = ctx->saved_data["mode"].toStringRef();
    return {call_backward(grad_output[0], saved[0], mode), at::Tensor()};
  }
};

// Makes a double backward fail loudly instead of silently giving zeros.
class CornerPoolBackwardFunction
    : public torch::autograd::Function<CornerPoolBackwardFunction> {
 public:
  static variable_list forward(AutogradContext* /*ctx*/,
                               const at::Tensor& grad_output,
                               const at::Tensor& input, c10::string_view mode) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return {call_backward(grad_output, input, mode)};
  }

  static variable_list backward(AutogradContext* /*ctx*/,
                                const variable_list& /*grad_output*/) {
    TORCH_CHECK(false,
                "corner_pool: double backward (the gradient of the gradient) "
                "is not supported");
  }
};

at::Tensor corner_pool_autograd(const at::Tensor& input, c10::string_view mode) {
  return CornerPoolFunction::apply(input, mode)[0];
}

at::Tensor corner_pool_backward_autograd(const at::Tensor& grad_output,
                                         const at::Tensor& input,
                                         c10::string_view mode) {
  return CornerPoolBackwardFunction::apply(grad_output, input, mode)[0];
}

}  // namespace

TORCH_LIBRARY_IMPL(visdet_ops, Autograd, m) {
  m.impl("corner_pool", &corner_pool_autograd);
  m.impl("_corner_pool_backward", &corner_pool_backward_autograd);
}

}  // namespace visdet_ops
