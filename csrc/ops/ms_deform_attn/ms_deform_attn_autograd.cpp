// multi_scale_deformable_attn: autograd (device-independent), in C++ as
// torchvision does for roi_align: a Python autograd formula costs tens to
// hundreds of microseconds per call. Gradients flow to value,
// sampling_locations and attention_weights (never to the integer level
// tables). The backward is its own op, _multi_scale_deformable_attn_backward,
// so that torch.compile and the fake-tensor machinery see it.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/library.h>

namespace visdet_ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

at::Tensor call_forward(const at::Tensor& value,
                        const at::Tensor& spatial_shapes,
                        const at::Tensor& level_start_index,
                        const at::Tensor& sampling_locations,
                        const at::Tensor& attention_weights,
                        int64_t im2col_step) {
  static auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("visdet_ops::multi_scale_deformable_attn", "")
          .typed<at::Tensor(const at::Tensor&, const at::Tensor&,
                            const at::Tensor&, const at::Tensor&,
                            const at::Tensor&, int64_t)>();
  return op.call(value, spatial_shapes, level_start_index, sampling_locations,
                 attention_weights, im2col_step);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> call_backward(
    const at::Tensor& grad_output, const at::Tensor& value,
    const at::Tensor& spatial_shapes, const at::Tensor& level_start_index,
    const at::Tensor& sampling_locations, const at::Tensor& attention_weights,
    int64_t im2col_step) {
  static auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow(
              "visdet_ops::_multi_scale_deformable_attn_backward", "")
          .typed<std::tuple<at::Tensor, at::Tensor, at::Tensor>(
              const at::Tensor&, const at::Tensor&, const at::Tensor&,
              const at::Tensor&, const at::Tensor&, const at::Tensor&,
              int64_t)>();
  return op.call(grad_output, value, spatial_shapes, level_start_index,
                 sampling_locations, attention_weights, im2col_step);
}

class MSDAFunction : public torch::autograd::Function<MSDAFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& value,
                               const at::Tensor& spatial_shapes,
                               const at::Tensor& level_start_index,
                               const at::Tensor& sampling_locations,
                               const at::Tensor& attention_weights,
                               int64_t im2col_step) {
    ctx->saved_data["im2col_step"] = im2col_step;
    ctx->save_for_backward({value, spatial_shapes, level_start_index,
                            sampling_locations, attention_weights});
    at::AutoDispatchBelowADInplaceOrView guard;
    return {call_forward(value, spatial_shapes, level_start_index,
                         sampling_locations, attention_weights, im2col_step)};
  }

  static variable_list backward(AutogradContext* ctx,
                                const variable_list& grad_output) {
    const variable_list saved = ctx->get_saved_variables();
    auto [grad_value, grad_loc, grad_attn] = call_backward(
        grad_output[0], saved[0], saved[1], saved[2], saved[3], saved[4],
        ctx->saved_data["im2col_step"].toInt());
    // One entry per forward argument.
    return {grad_value, at::Tensor(), at::Tensor(),
            grad_loc,   grad_attn,    at::Tensor()};
  }
};

// Makes a double backward fail loudly instead of silently giving zeros.
class MSDABackwardFunction
    : public torch::autograd::Function<MSDABackwardFunction> {
 public:
  static variable_list forward(AutogradContext* /*ctx*/,
                               const at::Tensor& grad_output,
                               const at::Tensor& value,
                               const at::Tensor& spatial_shapes,
                               const at::Tensor& level_start_index,
                               const at::Tensor& sampling_locations,
                               const at::Tensor& attention_weights,
                               int64_t im2col_step) {
    at::AutoDispatchBelowADInplaceOrView guard;
    auto [grad_value, grad_loc, grad_attn] =
        call_backward(grad_output, value, spatial_shapes, level_start_index,
                      sampling_locations, attention_weights, im2col_step);
    return {grad_value, grad_loc, grad_attn};
  }

  static variable_list backward(AutogradContext* /*ctx*/,
                                const variable_list& /*grad_output*/) {
    TORCH_CHECK(false,
                "multi_scale_deformable_attn: double backward (the gradient "
                "of the gradient) is not supported");
  }
};

at::Tensor msda_autograd(const at::Tensor& value,
                         const at::Tensor& spatial_shapes,
                         const at::Tensor& level_start_index,
                         const at::Tensor& sampling_locations,
                         const at::Tensor& attention_weights,
                         int64_t im2col_step) {
  return MSDAFunction::apply(value, spatial_shapes, level_start_index,
                             sampling_locations, attention_weights,
                             im2col_step)[0];
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> msda_backward_autograd(
    const at::Tensor& grad_output, const at::Tensor& value,
    const at::Tensor& spatial_shapes, const at::Tensor& level_start_index,
    const at::Tensor& sampling_locations, const at::Tensor& attention_weights,
    int64_t im2col_step) {
  const variable_list r = MSDABackwardFunction::apply(
      grad_output, value, spatial_shapes, level_start_index,
      sampling_locations, attention_weights, im2col_step);
  return {r[0], r[1], r[2]};
}

}  // namespace

TORCH_LIBRARY_IMPL(visdet_ops, Autograd, m) {
  m.impl("multi_scale_deformable_attn", &msda_autograd);
  m.impl("_multi_scale_deformable_attn_backward", &msda_backward_autograd);
}

}  // namespace visdet_ops
