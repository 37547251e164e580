// sigmoid_focal_loss / softmax_focal_loss: CPU host layer (torch-facing,
// through the host adapter), the mirror image of focal_loss_cuda_host.cpp. CPU
// loops: focal_loss_cpu.cpp.
#include <algorithm>
#include <optional>
#include <tuple>

#include "common/checks.h"
#include "common/host.h"
#include "focal_loss.h"
#include "focal_loss_kernel.h"
#include "focal_loss_launch.h"

namespace visdet_ops {
namespace {

using focal_loss_detail::kMean;
using focal_loss_detail::kNone;
using host::ScalarType;
using host::Tensor;

int64_t grain_rows(int64_t classes) {
  return std::max<int64_t>(1, 4096 / std::max<int64_t>(classes, 1));
}

// The loss and, with_grad, the gradient of the reduced loss (else undefined).
std::tuple<Tensor, Tensor> focal_loss_forward_cpu_impl(
    FocalKind kind, const Tensor& input, const Tensor& target, double gamma,
    double alpha, const std::optional<Tensor>& weight,
    host::StringArg reduction, bool with_grad) {
  FocalLossForward f = focal_loss_prepare_forward(
      kind, input, target, gamma, alpha, weight, reduction, with_grad);
  VISDET_CHECK(host::is_cpu(f.input), focal_loss_op_name(kind),
               ": the CPU kernel needs CPU tensors, got input on ",
               host::device_of(f.input));
  if (f.empty()) return {focal_loss_empty_forward(f), f.grad};
  focal_loss_check_targets(kind, f.target, f.classes);
  const bool sigmoid_elements =
      kind == FocalKind::kSigmoid && f.reduction == kNone;
  const ScalarType dtype = host::dtype_of(f.input);
  // Per-row losses (summed over classes for the sigmoid), reduced by aten::sum.
  const Tensor per_row = (f.reduction == kNone && kind == FocalKind::kSoftmax)
                             ? f.output
                             : host::empty({f.rows}, dtype, f.input);
  host::dispatch_float_double(dtype, "focal_loss_forward_cpu", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = host::const_data<T>(f.input);
    const int64_t* tg = host::const_data<int64_t>(f.target);
    const T* w = f.has_weight ? host::const_data<T>(f.weight) : nullptr;
    const auto g = static_cast<T>(gamma);
    const auto a = static_cast<T>(alpha);
    T* loss = sigmoid_elements ? host::mutable_data<T>(f.output) : nullptr;
    T* row = host::mutable_data<T>(per_row);
    const auto grad_scale = static_cast<T>(f.grad_scale);
    T* grad = f.with_grad ? host::mutable_data<T>(f.grad) : nullptr;
    host::parallel_for(
        0, f.rows, grain_rows(f.classes), [&](int64_t begin, int64_t end) {
          if (kind == FocalKind::kSigmoid) {
            sigmoid_focal_loss_forward_cpu<T>(in, tg, w, f.classes, g, a,
                                              begin, end, loss, row,
                                              grad_scale, grad);
          } else {
            softmax_focal_loss_forward_cpu<T>(in, tg, w, f.classes, g, a,
                                              begin, end, row, grad_scale,
                                              grad);
          }
        });
  });
  if (f.reduction == kNone) return {f.output, f.grad};
  const Tensor total = host::sum_all(per_row);
  if (f.reduction == kMean) {
    // In T, as at::Tensor::div_(double) divides a CPU float tensor.
    host::dispatch_float_double(dtype, "focal_loss_forward_cpu", [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* value = host::mutable_data<T>(total);
      *value = *value / static_cast<T>(f.rows);
    });
  }
  return {total, f.grad};
}

Tensor focal_loss_backward_cpu_impl(FocalKind kind, const Tensor& grad_output,
                                    const Tensor& input, const Tensor& target,
                                    double gamma, double alpha,
                                    const std::optional<Tensor>& weight,
                                    host::StringArg reduction) {
  FocalLossBackward b = focal_loss_prepare_backward(
      kind, grad_output, input, target, gamma, alpha, weight, reduction);
  VISDET_CHECK(host::is_cpu(b.input), focal_loss_op_name(kind),
               ": the CPU kernel needs CPU tensors, got input on ",
               host::device_of(b.input));
  if (b.empty()) return b.grad_input;
  focal_loss_check_targets(kind, b.target, b.classes);
  host::dispatch_float_double(
      host::dtype_of(b.input), "focal_loss_backward_cpu", [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* go = host::const_data<T>(b.grad_output);
        const T* in = host::const_data<T>(b.input);
        const int64_t* tg = host::const_data<int64_t>(b.target);
        const T* w = b.has_weight ? host::const_data<T>(b.weight) : nullptr;
        const auto g = static_cast<T>(gamma);
        const auto a = static_cast<T>(alpha);
        const auto scale = static_cast<T>(b.scale);
        T* gi = host::mutable_data<T>(b.grad_input);
        host::parallel_for(
            0, b.rows, grain_rows(b.classes), [&](int64_t begin, int64_t end) {
              if (kind == FocalKind::kSigmoid) {
                sigmoid_focal_loss_backward_cpu<T>(
                    go, b.go_stride_n, b.go_stride_c, scale, in, tg, w,
                    b.classes, g, a, begin, end, gi);
              } else {
                softmax_focal_loss_backward_cpu<T>(go, b.go_stride_n, scale,
                                                   in, tg, w, b.classes, g, a,
                                                   begin, end, gi);
              }
            });
      });
  return b.grad_input;
}

// float16/bfloat16 on the CPU compute through float32 copies, rounded once to
// the input's dtype.
bool is_reduced_float(const Tensor& t) {
  return host::is_reduced_float(host::dtype_of(t));
}

std::optional<Tensor> float_if_reduced(const std::optional<Tensor>& t) {
  if (!t.has_value() || !t->defined() || !is_reduced_float(*t)) return t;
  return host::to_dtype(*t, ScalarType::Float);
}

// The device's forward of a kind (focal_loss.h registers the loss-only and
// the with-grad op over it; the kind is a template argument so that each
// registers as a plain function).
template <FocalKind kKind>
std::tuple<Tensor, Tensor> focal_loss_forward_cpu(
    const Tensor& input, const Tensor& target, double gamma, double alpha,
    const std::optional<Tensor>& weight, host::StringArg reduction,
    bool with_grad) {
  if (is_reduced_float(input)) {
    focal_loss_check_inputs(kKind, input, target, gamma, alpha, weight,
                            reduction);
    const auto [loss, grad] = focal_loss_forward_cpu_impl(
        kKind, host::to_dtype(input, ScalarType::Float), target, gamma, alpha,
        float_if_reduced(weight), reduction, with_grad);
    const ScalarType dtype = host::dtype_of(input);
    return {host::to_dtype(loss, dtype),
            with_grad ? host::to_dtype(grad, dtype) : grad};
  }
  return focal_loss_forward_cpu_impl(kKind, input, target, gamma, alpha,
                                     weight, reduction, with_grad);
}

template <FocalKind kKind>
Tensor focal_loss_backward_cpu_kernel(const Tensor& grad_output,
                                      const Tensor& input, const Tensor& target,
                                      double gamma, double alpha,
                                      const std::optional<Tensor>& weight,
                                      host::StringArg reduction) {
  if (is_reduced_float(input)) {
    focal_loss_check_inputs(kKind, input, target, gamma, alpha, weight,
                            reduction);
    check_same_dtype(input, grad_output, focal_loss_op_name(kKind), "input",
                     "grad_output");
    return host::to_dtype(
        focal_loss_backward_cpu_impl(
            kKind, host::to_dtype(grad_output, ScalarType::Float),
            host::to_dtype(input, ScalarType::Float), target, gamma, alpha,
            float_if_reduced(weight), reduction),
        host::dtype_of(input));
  }
  return focal_loss_backward_cpu_impl(kKind, grad_output, input, target,
                                      gamma, alpha, weight, reduction);
}

// grad_input *= grad_output, skipped where grad_output is 1 (loss.backward()).
void focal_loss_scale_grad_cpu_kernel(const Tensor& grad_input,
                                      const Tensor& grad_output) {
  focal_loss_check_scale_grad(grad_input, grad_output);
  VISDET_CHECK(host::is_cpu(grad_input), "_focal_loss_scale_grad_",
               ": the CPU kernel needs CPU tensors, got grad_input on ",
               host::device_of(grad_input));
  host::dispatch_float_double(
      host::dtype_of(grad_input), "_focal_loss_scale_grad_", [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T k = *host::const_data<T>(grad_output);
        if (k == T(1)) return;
        T* g = host::mutable_data<T>(grad_input);
        host::parallel_for(0, grad_input.numel(), 16384,
                           [&](int64_t begin, int64_t end) {
                             for (int64_t i = begin; i < end; ++i) g[i] *= k;
                           });
      });
}

}  // namespace

VISDET_LIBRARY_IMPL(CPU, m) {
  m.impl("_sigmoid_focal_loss_forward_with_grad",
         VISDET_KERNEL(focal_loss_forward_with_grad_kernel<
                       focal_loss_forward_cpu<FocalKind::kSigmoid>>));
  m.impl("_softmax_focal_loss_forward_with_grad",
         VISDET_KERNEL(focal_loss_forward_with_grad_kernel<
                       focal_loss_forward_cpu<FocalKind::kSoftmax>>));
  m.impl("_focal_loss_scale_grad_",
         VISDET_KERNEL(focal_loss_scale_grad_cpu_kernel));
}
VISDET_IMPL_WITH_BACKWARD(
    CPU, sigmoid_focal_loss,
    focal_loss_forward_kernel<focal_loss_forward_cpu<FocalKind::kSigmoid>>,
    focal_loss_backward_cpu_kernel<FocalKind::kSigmoid>)
VISDET_IMPL_WITH_BACKWARD(
    CPU, softmax_focal_loss,
    focal_loss_forward_kernel<focal_loss_forward_cpu<FocalKind::kSoftmax>>,
    focal_loss_backward_cpu_kernel<FocalKind::kSoftmax>)

}  // namespace visdet_ops
