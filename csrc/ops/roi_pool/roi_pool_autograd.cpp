// roi_pool: autograd in C++ (a torch::autograd::Function registered for the
// Autograd key, as torchvision does), so a call pays no Python autograd cost.
// The backward is its own op (_roi_pool_backward: a kernel per device and a
// fake impl in Python), so torch.compile traces it like any other op.
#include <torch/autograd.h>
#include <torch/library.h>

#include <ATen/core/dispatch/Dispatcher.h>

namespace visdet_ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::Variable;
using torch::autograd::variable_list;

using RoIPoolOutputs = std::tuple<at::Tensor, at::Tensor>;

RoIPoolOutputs call_roi_pool(const at::Tensor& input, const at::Tensor& rois,
                             c10::SymInt pooled_height,
                             c10::SymInt pooled_width, double spatial_scale) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("visdet_ops::roi_pool", "")
          .typed<RoIPoolOutputs(const at::Tensor&, const at::Tensor&,
                                c10::SymInt, c10::SymInt, double)>();
  return op.call(input, rois, std::move(pooled_height),
                 std::move(pooled_width), spatial_scale);
}

at::Tensor call_roi_pool_backward(const at::Tensor& grad_output,
                                  const at::Tensor& rois,
                                  const at::Tensor& argmax,
                                  c10::SymInt batch_size, c10::SymInt channels,
                                  c10::SymInt height, c10::SymInt width) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("visdet_ops::_roi_pool_backward", "")
          .typed<at::Tensor(const at::Tensor&, const at::Tensor&,
                            const at::Tensor&, c10::SymInt, c10::SymInt,
                            c10::SymInt, c10::SymInt)>();
  return op.call(grad_output, rois, argmax, std::move(batch_size),
                 std::move(channels), std::move(height), std::move(width));
}

class RoIPoolFunction : public torch::autograd::Function<RoIPoolFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const Variable& input,
                               const Variable& rois, c10::SymInt pooled_height,
                               c10::SymInt pooled_width,
                               double spatial_scale) {
    ctx->saved_data["input_shape"] = input.sym_sizes();
    at::AutoDispatchBelowADInplaceOrView guard;
    auto [output, argmax] =
        call_roi_pool(input, rois, std::move(pooled_height),
                      std::move(pooled_width), spatial_scale);
    ctx->save_for_backward({rois, argmax});
    ctx->mark_non_differentiable({argmax});
    return {output, argmax};
  }

  static variable_list backward(AutogradContext* ctx,
                                const variable_list& grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const auto shape = ctx->saved_data["input_shape"].toList();
    at::Tensor grad_input = call_roi_pool_backward(
        grad_outputs[0], saved[0], saved[1], shape.get(0).toSymInt(),
        shape.get(1).toSymInt(), shape.get(2).toSymInt(),
        shape.get(3).toSymInt());
    return {grad_input, Variable(), Variable(), Variable(), Variable()};
  }
};

// The backward op under autograd: computes the gradient, is not itself
// differentiable (as in torchvision).
class RoIPoolBackwardFunction
    : public torch::autograd::Function<RoIPoolBackwardFunction> {
 public:
  static variable_list forward(AutogradContext* /*ctx*/,
                               const Variable& grad_output,
                               const Variable& rois, const Variable& argmax,
                               c10::SymInt batch_size, c10::SymInt channels,
                               c10::SymInt height, c10::SymInt width) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return {call_roi_pool_backward(grad_output, rois, argmax,
                                   std::move(batch_size), std::move(channels),
                                   std::move(height), std::move(width))};
  }

  static variable_list backward(AutogradContext* /*ctx*/,
                                const variable_list& /*grad_outputs*/) {
    TORCH_CHECK(false, "roi_pool: double backward is not supported");
  }
};

RoIPoolOutputs roi_pool_autograd(const at::Tensor& input,
                                 const at::Tensor& rois,
                                 c10::SymInt pooled_height,
                                 c10::SymInt pooled_width,
                                 double spatial_scale) {
  const auto out =
      RoIPoolFunction::apply(input, rois, std::move(pooled_height),
                             std::move(pooled_width), spatial_scale);
  return {out[0], out[1]};
}

at::Tensor roi_pool_backward_autograd(const at::Tensor& grad_output,
                                      const at::Tensor& rois,
                                      const at::Tensor& argmax,
                                      c10::SymInt batch_size,
                                      c10::SymInt channels, c10::SymInt height,
                                      c10::SymInt width) {
  return RoIPoolBackwardFunction::apply(
      grad_output, rois, argmax, std::move(batch_size), std::move(channels),
      std::move(height), std::move(width))[0];
}

}  // namespace

TORCH_LIBRARY_IMPL(visdet_ops, Autograd, m) {
  m.impl("roi_pool", &roi_pool_autograd);
  m.impl("_roi_pool_backward", &roi_pool_backward_autograd);
}

}  // namespace visdet_ops
