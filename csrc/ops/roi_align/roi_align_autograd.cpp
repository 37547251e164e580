// roi_align: autograd in C++ (a torch::autograd::Function registered for the
// Autograd key, as torchvision does), so a call pays no Python autograd cost.
// The backward is its own op (_roi_align_backward: a kernel per device and a
// fake impl in Python), so torch.compile traces it like any other op.
#include <torch/autograd.h>
#include <torch/library.h>

#include <ATen/core/dispatch/Dispatcher.h>

#include <string>

namespace visdet_ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::Variable;
using torch::autograd::variable_list;

using RoIAlignOutputs = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

RoIAlignOutputs call_roi_align(const at::Tensor& input, const at::Tensor& rois,
                               c10::SymInt pooled_height,
                               c10::SymInt pooled_width, double spatial_scale,
                               int64_t sampling_ratio,
                               c10::string_view pool_mode, bool aligned) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("visdet_ops::roi_align", "")
          .typed<RoIAlignOutputs(const at::Tensor&, const at::Tensor&,
                                 c10::SymInt, c10::SymInt, double, int64_t,
                                 c10::string_view, bool)>();
  return op.call(input, rois, std::move(pooled_height),
                 std::move(pooled_width), spatial_scale, sampling_ratio,
                 pool_mode, aligned);
}

at::Tensor call_roi_align_backward(
    const at::Tensor& grad_output, const at::Tensor& rois,
    const at::Tensor& argmax_y, const at::Tensor& argmax_x,
    c10::SymInt batch_size, c10::SymInt channels, c10::SymInt height,
    c10::SymInt width, double spatial_scale, int64_t sampling_ratio,
    c10::string_view pool_mode, bool aligned) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("visdet_ops::_roi_align_backward", "")
          .typed<at::Tensor(const at::Tensor&, const at::Tensor&,
                            const at::Tensor&, const at::Tensor&, c10::SymInt,
                            c10::SymInt, c10::SymInt, c10::SymInt, double,
                            int64_t, c10::string_view, bool)>();
  return op.call(grad_output, rois, argmax_y, argmax_x, std::move(batch_size),
                 std::move(channels), std::move(height), std::move(width),
                 spatial_scale, sampling_ratio, pool_mode, aligned);
}

class RoIAlignFunction : public torch::autograd::Function<RoIAlignFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const Variable& input,
                               const Variable& rois, c10::SymInt pooled_height,
                               c10::SymInt pooled_width, double spatial_scale,
                               int64_t sampling_ratio,
                               c10::string_view pool_mode, bool aligned) {
    ctx->saved_data["input_shape"] = input.sym_sizes();
    ctx->saved_data["spatial_scale"] = spatial_scale;
    ctx->saved_data["sampling_ratio"] = sampling_ratio;
    ctx->saved_data["pool_mode"] = std::string(pool_mode);
    ctx->saved_data["aligned"] = aligned;
    at::AutoDispatchBelowADInplaceOrView guard;
    auto [output, argmax_y, argmax_x] =
        call_roi_align(input, rois, std::move(pooled_height),
                       std::move(pooled_width), spatial_scale, sampling_ratio,
                       pool_mode, aligned);
    ctx->save_for_backward({rois, argmax_y, argmax_x});
    ctx->mark_non_differentiable({argmax_y, argmax_x});
    return {output, argmax_y, argmax_x};
  }

  static variable_list backward(AutogradContext* ctx,
                                const variable_list& grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const auto shape = ctx->saved_data["input_shape"].toList();
    const std::string pool_mode = ctx->saved_data["pool_mode"].toStringRef();
    at::Tensor grad_input = call_roi_align_backward(
        grad_outputs[0], saved[0], saved[1], saved[2],
        shape.get(0).toSymInt(), shape.get(1).toSymInt(),
        shape.get(2).toSymInt(), shape.get(3).toSymInt(),
        ctx->saved_data["spatial_scale"].toDouble(),
        ctx->saved_data["sampling_ratio"].toInt(), pool_mode,
        ctx->saved_data["aligned"].toBool());
    return {grad_input, Variable(), Variable(), Variable(),
            Variable(),  Variable(), Variable(), Variable()};
  }
};

// The backward op under autograd: computes the gradient, is not itself
// differentiable (as in torchvision).
class RoIAlignBackwardFunction
    : public torch::autograd::Function<RoIAlignBackwardFunction> {
 public:
  static variable_list forward(AutogradContext* /*ctx*/,
                               const Variable& grad_output,
                               const Variable& rois, const Variable& argmax_y,
                               const Variable& argmax_x,
                               c10::SymInt batch_size, c10::SymInt channels,
                               c10::SymInt height, c10::SymInt width,
                               double spatial_scale, int64_t sampling_ratio,
                               c10::string_view pool_mode, bool aligned) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return {call_roi_align_backward(
        grad_output, rois, argmax_y, argmax_x, std::move(batch_size),
        std::move(channels), std::move(height), std::move(width),
        spatial_scale, sampling_ratio, pool_mode, aligned)};
  }

  static variable_list backward(AutogradContext* /*ctx*/,
                                const variable_list& /*grad_outputs*/) {
    TORCH_CHECK(false, "roi_align: double backward is not supported");
  }
};

RoIAlignOutputs roi_align_autograd(const at::Tensor& input,
                                   const at::Tensor& rois,
                                   c10::SymInt pooled_height,
                                   c10::SymInt pooled_width,
                                   double spatial_scale,
                                   int64_t sampling_ratio,
                                   c10::string_view pool_mode, bool aligned) {
  const auto out = RoIAlignFunction::apply(
      input, rois, std::move(pooled_height), std::move(pooled_width),
      spatial_scale, sampling_ratio, pool_mode, aligned);
  return {out[0], out[1], out[2]};
}

at::Tensor roi_align_backward_autograd(
    const at::Tensor& grad_output, const at::Tensor& rois,
    const at::Tensor& argmax_y, const at::Tensor& argmax_x,
    c10::SymInt batch_size, c10::SymInt channels, c10::SymInt height,
    c10::SymInt width, double spatial_scale, int64_t sampling_ratio,
    c10::string_view pool_mode, bool aligned) {
  return RoIAlignBackwardFunction::apply(
      grad_output, rois, argmax_y, argmax_x, std::move(batch_size),
      std::move(channels), std::move(height), std::move(width), spatial_scale,
      sampling_ratio, pool_mode, aligned)[0];
}

}  // namespace

TORCH_LIBRARY_IMPL(visdet_ops, Autograd, m) {
  m.impl("roi_align", &roi_align_autograd);
  m.impl("_roi_align_backward", &roi_align_backward_autograd);
}

}  // namespace visdet_ops
