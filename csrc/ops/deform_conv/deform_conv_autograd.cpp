// deform_conv: autograd (device-independent), in C++ as torchvision does for
// its ops: a Python autograd formula costs tens to hundreds of microseconds a
// call. The backward is its own op, _deform_conv2d_backward, so that
// torch.compile and the fake-tensor machinery see it.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <optional>

namespace visdet_ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct Ints {
  int64_t stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups,
      deform_groups, im2col_step;
};

at::Tensor call_forward(const at::Tensor& input, const at::Tensor& offset,
                        const std::optional<at::Tensor>& mask,
                        const at::Tensor& weight,
                        const std::optional<at::Tensor>& bias, const Ints& p) {
  static auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("visdet_ops::deform_conv2d", "")
          .typed<at::Tensor(const at::Tensor&, const at::Tensor&,
                            const std::optional<at::Tensor>&, const at::Tensor&,
                            const std::optional<at::Tensor>&, int64_t, int64_t,
                            int64_t, int64_t, int64_t, int64_t, int64_t,
                            int64_t, int64_t)>();
  return op.call(input, offset, mask, weight, bias, p.stride_h, p.stride_w,
                 p.pad_h, p.pad_w, p.dilation_h, p.dilation_w, p.groups,
                 p.deform_groups, p.im2col_step);
}

using Grads =
    std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

Grads call_backward(const at::Tensor& grad_output, const at::Tensor& input,
                    const at::Tensor& offset,
                    const std::optional<at::Tensor>& mask,
                    const at::Tensor& weight,
                    const std::optional<at::Tensor>& bias, const Ints& p) {
  static auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("visdet_ops::_deform_conv2d_backward", "")
          .typed<Grads(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                       const std::optional<at::Tensor>&, const at::Tensor&,
                       const std::optional<at::Tensor>&, int64_t, int64_t,
                       int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                       int64_t)>();
  return op.call(grad_output, input, offset, mask, weight, bias, p.stride_h,
                 p.stride_w, p.pad_h, p.pad_w, p.dilation_h, p.dilation_w,
                 p.groups, p.deform_groups, p.im2col_step);
}

std::optional<at::Tensor> optional_of(const at::Tensor& t) {
  return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt;
}

void save_ints(AutogradContext* ctx, const Ints& p) {
  ctx->saved_data["ints"] = std::vector<int64_t>{
      p.stride_h, p.stride_w, p.pad_h, p.pad_w, p.dilation_h, p.dilation_w,
      p.groups, p.deform_groups, p.im2col_step};
}

Ints load_ints(AutogradContext* ctx) {
  const std::vector<int64_t> v = ctx->saved_data["ints"].toIntVector();
  return Ints{v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8]};
}

class DeformConv2dFunction
    : public torch::autograd::Function<DeformConv2dFunction> {
 public:
  static variable_list forward(
      AutogradContext* ctx, const at::Tensor& input, const at::Tensor& offset,
      const std::optional<at::Tensor>& mask, const at::Tensor& weight,
      const std::optional<at::Tensor>& bias, int64_t stride_h,
      int64_t stride_w, int64_t pad_h, int64_t pad_w, int64_t dilation_h,
      int64_t dilation_w, int64_t groups, int64_t deform_groups,
      int64_t im2col_step) {
    const Ints p{stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w,
                 groups, deform_groups, im2col_step};
    save_ints(ctx, p);
    ctx->save_for_backward({input, offset, mask.value_or(at::Tensor()), weight,
                            bias.value_or(at::Tensor())});
    at::AutoDispatchBelowADInplaceOrView guard;
    return {call_forward(input, offset, mask, weight, bias, p)};
  }

  static variable_list backward(AutogradContext* ctx,
                                const variable_list& grad_output) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor& mask = saved[2];
    const at::Tensor& bias = saved[4];
    auto [gi, go, gm, gw, gb] =
        call_backward(grad_output[0], saved[0], saved[1], optional_of(mask),
                      saved[3], optional_of(bias), load_ints(ctx));
    // One entry per forward argument: 5 tensors, then the 9 ints.
    variable_list grads{gi, go, mask.defined() ? gm : at::Tensor(), gw,
                        bias.defined() ? gb : at::Tensor()};
    grads.resize(14);
    return grads;
  }
};

// Makes a double backward fail loudly instead of silently giving zeros.
class DeformConv2dBackwardFunction
    : public torch::autograd::Function<DeformConv2dBackwardFunction> {
 public:
  static variable_list forward(
      AutogradContext* /*ctx*/, const at::Tensor& grad_output,
      const at::Tensor& input, const at::Tensor& offset,
      const std::optional<at::Tensor>& mask, const at::Tensor& weight,
      const std::optional<at::Tensor>& bias, const Ints& p) {
    at::AutoDispatchBelowADInplaceOrView guard;
    auto [gi, go, gm, gw, gb] =
        call_backward(grad_output, input, offset, mask, weight, bias, p);
    return {gi, go, gm, gw, gb};
  }

  static variable_list backward(AutogradContext* /*ctx*/,
                                const variable_list& /*grad_output*/) {
    TORCH_CHECK(false,
                "deform_conv2d: double backward (the gradient of the "
                "gradient) is not supported");
  }
};

at::Tensor deform_conv2d_autograd(
    const at::Tensor& input, const at::Tensor& offset,
    const std::optional<at::Tensor>& mask, const at::Tensor& weight,
    const std::optional<at::Tensor>& bias, int64_t stride_h, int64_t stride_w,
    int64_t pad_h, int64_t pad_w, int64_t dilation_h, int64_t dilation_w,
    int64_t groups, int64_t deform_groups, int64_t im2col_step) {
  return DeformConv2dFunction::apply(input, offset, mask, weight, bias,
                                     stride_h, stride_w, pad_h, pad_w,
                                     dilation_h, dilation_w, groups,
                                     deform_groups, im2col_step)[0];
}

Grads deform_conv2d_backward_autograd(
    const at::Tensor& grad_output, const at::Tensor& input,
    const at::Tensor& offset, const std::optional<at::Tensor>& mask,
    const at::Tensor& weight, const std::optional<at::Tensor>& bias,
    int64_t stride_h, int64_t stride_w, int64_t pad_h, int64_t pad_w,
    int64_t dilation_h, int64_t dilation_w, int64_t groups,
    int64_t deform_groups, int64_t im2col_step) {
  const variable_list r = DeformConv2dBackwardFunction::apply(
      grad_output, input, offset, mask, weight, bias,
      Ints{stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups,
           deform_groups, im2col_step});
  return {r[0], r[1], r[2], r[3], r[4]};
}

}  // namespace

TORCH_LIBRARY_IMPL(visdet_ops, Autograd, m) {
  m.impl("deform_conv2d", &deform_conv2d_autograd);
  m.impl("_deform_conv2d_backward", &deform_conv2d_backward_autograd);
}

}  // namespace visdet_ops
