// deform_roi_pool: autograd (device-independent), in C++ as torchvision does
// for roi_align: a Python autograd formula costs tens to hundreds of
// microseconds per call. Gradients flow to input and offset, never to rois
// (as in mmcv). The backward is its own op, _deform_roi_pool_backward, so
// that torch.compile and the fake-tensor machinery see it.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <optional>

namespace visdet_ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

at::Tensor call_forward(const at::Tensor& input, const at::Tensor& rois,
                        const std::optional<at::Tensor>& offset,
                        c10::SymInt pooled_height, c10::SymInt pooled_width,
                        double spatial_scale, int64_t sampling_ratio,
                        double gamma) {
  static auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("visdet_ops::deform_roi_pool", "")
          .typed<at::Tensor(const at::Tensor&, const at::Tensor&,
                            const std::optional<at::Tensor>&, c10::SymInt,
                            c10::SymInt, double, int64_t, double)>();
  return op.call(input, rois, offset, std::move(pooled_height),
                 std::move(pooled_width), spatial_scale, sampling_ratio, gamma);
}

std::tuple<at::Tensor, at::Tensor> call_backward(
    const at::Tensor& grad_output, const at::Tensor& input,
    const at::Tensor& rois, const std::optional<at::Tensor>& offset,
    double spatial_scale, int64_t sampling_ratio, double gamma) {
  static auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("visdet_ops::_deform_roi_pool_backward", "")
          .typed<std::tuple<at::Tensor, at::Tensor>(
              const at::Tensor&, const at::Tensor&, const at::Tensor&,
              const std::optional<at::Tensor>&, double, int64_t, double)>();
  return op.call(grad_output, input, rois, offset, spatial_scale,
                 sampling_ratio, gamma);
}

std::optional<at::Tensor> optional_of(const at::Tensor& t) {
  return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt;
}

class DeformRoIPoolFunction
    : public torch::autograd::Function<DeformRoIPoolFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& input,
                               const at::Tensor& rois,
                               const std::optional<at::Tensor>& offset,
                               c10::SymInt pooled_height,
                               c10::SymInt pooled_width, double spatial_scale,
                               int64_t sampling_ratio, double gamma) {
    ctx->saved_data["spatial_scale"] = spatial_scale;
    ctx->saved_data["sampling_ratio"] = sampling_ratio;
    ctx->saved_data["gamma"] = gamma;
    const at::Tensor off =
        offset.has_value() ? *offset : at::Tensor();  // undefined: no offset
    ctx->save_for_backward({input, rois, off});
    at::AutoDispatchBelowADInplaceOrView guard;
    return {call_forward(input, rois, offset, std::move(pooled_height),
                         std::move(pooled_width), spatial_scale,
                         sampling_ratio, gamma)};
  }

  static variable_list backward(AutogradContext* ctx,
                                const variable_list& grad_output) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor& offset = saved[2];
    auto [grad_input, grad_offset] = call_backward(
        grad_output[0], saved[0], saved[1], optional_of(offset),
        ctx->saved_data["spatial_scale"].toDouble(),
        ctx->saved_data["sampling_ratio"].toInt(),
        ctx->saved_data["gamma"].toDouble());
    // One entry per forward argument: input, rois, offset, then the five
    // non-tensor arguments.
    return {grad_input,
            at::Tensor(),
            offset.defined() ? grad_offset : at::Tensor(),
            at::Tensor(),
            at::Tensor(),
            at::Tensor(),
            at::Tensor(),
            at::Tensor()};
  }
};

// Makes a double backward fail loudly instead of silently giving zeros.
class DeformRoIPoolBackwardFunction
    : public torch::autograd::Function<DeformRoIPoolBackwardFunction> {
 public:
  static variable_list forward(AutogradContext* /*ctx*/,
                               const at::Tensor& grad_output,
                               const at::Tensor& input, const at::Tensor& rois,
                               const std::optional<at::Tensor>& offset,
                               double spatial_scale, int64_t sampling_ratio,
                               double gamma) {
    at::AutoDispatchBelowADInplaceOrView guard;
    auto [grad_input, grad_offset] =
        call_backward(grad_output, input, rois, offset, spatial_scale,
                      sampling_ratio, gamma);
    return {grad_input, grad_offset};
  }

  static variable_list backward(AutogradContext* /*ctx*/,
                                const variable_list& /*grad_output*/) {
    TORCH_CHECK(false,
                "deform_roi_pool: double backward (the gradient of the "
                "gradient) is not supported");
  }
};

at::Tensor deform_roi_pool_autograd(const at::Tensor& input,
                                    const at::Tensor& rois,
                                    const std::optional<at::Tensor>& offset,
                                    c10::SymInt pooled_height,
                                    c10::SymInt pooled_width,
                                    double spatial_scale,
                                    int64_t sampling_ratio, double gamma) {
  return DeformRoIPoolFunction::apply(input, rois, offset,
                                      std::move(pooled_height),
                                      std::move(pooled_width), spatial_scale,
                                      sampling_ratio, gamma)[0];
}

std::tuple<at::Tensor, at::Tensor> deform_roi_pool_backward_autograd(
    const at::Tensor& grad_output, const at::Tensor& input,
    const at::Tensor& rois, const std::optional<at::Tensor>& offset,
    double spatial_scale, int64_t sampling_ratio, double gamma) {
  const variable_list r = DeformRoIPoolBackwardFunction::apply(
      grad_output, input, rois, offset, spatial_scale, sampling_ratio, gamma);
  return {r[0], r[1]};
}

}  // namespace

TORCH_LIBRARY_IMPL(visdet_ops, Autograd, m) {
  m.impl("deform_roi_pool", &deform_roi_pool_autograd);
  m.impl("_deform_roi_pool_backward", &deform_roi_pool_backward_autograd);
}

}  // namespace visdet_ops
