// sigmoid_focal_loss / softmax_focal_loss: schema, argument checks shared by
// all devices, CPU registration.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "common/checks.h"
#include "common/reduced_float.h"
#include "focal_loss.h"
#include "focal_loss_kernel.h"

namespace visdet_ops {
namespace {

using focal_loss_detail::kMean;
using focal_loss_detail::kNone;
using focal_loss_detail::kSum;

int parse_reduction(const char* op, c10::string_view reduction) {
  if (reduction == "none") return kNone;
  if (reduction == "mean") return kMean;
  if (reduction == "sum") return kSum;
  TORCH_CHECK(false, op, ": reduction must be 'none', 'mean' or 'sum', got '",
              std::string(reduction), "'");
}

// Checks shared by forward and backward; returns the parsed reduction.
int check_inputs(FocalKind kind, const at::Tensor& input,
                 const at::Tensor& target, double gamma, double alpha,
                 const std::optional<at::Tensor>& weight,
                 c10::string_view reduction) {
  const char* op = focal_loss_op_name(kind);
  check_dim(input, 2, op, "input");
  check_floating(input, op, "input");
  check_dim(target, 1, op, "target");
  TORCH_CHECK(target.scalar_type() == at::kLong, op,
              ": target must be an int64 tensor of class indices, got ",
              target.scalar_type());
  TORCH_CHECK(target.size(0) == input.size(0), op,
              ": target must have shape [N] with N = input.size(0) = ",
              input.size(0), ", got ", target.sizes());
  check_same_device(input, target, op, "input", "target");
  if (weight.has_value() && weight->defined()) {
    TORCH_CHECK(weight->dim() == 1 && weight->size(0) == input.size(1), op,
                ": weight must have shape [C] = [", input.size(1),
                "] (one weight per class), got ", weight->sizes());
    check_same_dtype(input, *weight, op, "input", "weight");
    check_same_device(input, *weight, op, "input", "weight");
  }
  TORCH_CHECK(std::isfinite(gamma) && gamma >= 0, op,
              ": gamma must be a non-negative finite number, got ", gamma);
  TORCH_CHECK(std::isfinite(alpha), op, ": alpha must be a finite number, got ",
              alpha);
  return parse_reduction(op, reduction);
}

at::Tensor contiguous_weight(const std::optional<at::Tensor>& weight) {
  return (weight.has_value() && weight->defined()) ? weight->contiguous()
                                                   : at::Tensor();
}

}  // namespace

const char* focal_loss_op_name(FocalKind kind) {
  return kind == FocalKind::kSigmoid ? "sigmoid_focal_loss"
                                     : "softmax_focal_loss";
}

FocalLossForward focal_loss_prepare_forward(
    FocalKind kind, const at::Tensor& input, const at::Tensor& target,
    double gamma, double alpha, const std::optional<at::Tensor>& weight,
    c10::string_view reduction) {
  FocalLossForward f;
  f.kind = kind;
  f.reduction =
      check_inputs(kind, input, target, gamma, alpha, weight, reduction);
  f.rows = input.size(0);
  f.classes = input.size(1);
  f.gamma = gamma;
  f.alpha = alpha;
  f.input = input.contiguous();
  f.target = target.contiguous();
  f.weight = contiguous_weight(weight);
  if (f.reduction != kNone) {
    f.output = at::empty({}, input.options());
  } else if (kind == FocalKind::kSigmoid) {
    f.output = at::empty({f.rows, f.classes}, input.options());
  } else {
    f.output = at::empty({f.rows}, input.options());
  }
  return f;
}

at::Tensor focal_loss_empty_forward(const FocalLossForward& f) {
  focal_loss_check_targets(f.kind, f.target, f.classes);
  if (f.reduction == kMean) {
    const double value = f.rows == 0 ? std::numeric_limits<double>::quiet_NaN()
                                     : 0.0;
    return at::full({}, value, f.output.options());
  }
  return at::zeros_like(f.output);
}

void focal_loss_check_targets(FocalKind kind, const at::Tensor& target,
                              int64_t classes) {
  if (target.numel() == 0) return;
  const char* op = focal_loss_op_name(kind);
  const auto minmax = at::aminmax(target);
  const int64_t lo = std::get<0>(minmax).item<int64_t>();
  const int64_t hi = std::get<1>(minmax).item<int64_t>();
  if (kind == FocalKind::kSigmoid) {
    TORCH_CHECK(lo >= 0 && hi <= classes, op,
                ": target values must lie in [0, num_classes] = [0, ", classes,
                "] (num_classes marks background), got values in [", lo, ", ",
                hi, "]");
  } else {
    TORCH_CHECK(hi < classes, op,
                ": target values must be < num_classes = ", classes,
                " (negative values mark ignored rows), got a maximum of ", hi);
  }
}

bool sync_target_checks_enabled() {
  return sync_checks_enabled("VISDET_OPS_SYNC_TARGET_CHECKS");
}

FocalLossBackward focal_loss_prepare_backward(
    FocalKind kind, const at::Tensor& grad_output, const at::Tensor& input,
    const at::Tensor& target, double gamma, double alpha,
    const std::optional<at::Tensor>& weight, c10::string_view reduction) {
  const char* op = focal_loss_op_name(kind);
  FocalLossBackward b;
  b.kind = kind;
  b.reduction =
      check_inputs(kind, input, target, gamma, alpha, weight, reduction);
  check_same_dtype(input, grad_output, op, "input", "grad_output");
  check_same_device(input, grad_output, op, "input", "grad_output");
  b.rows = input.size(0);
  b.classes = input.size(1);
  b.gamma = gamma;
  b.alpha = alpha;
  if (b.reduction != kNone) {
    TORCH_CHECK(grad_output.dim() == 0, op,
                ": grad_output of a reduced loss must be a scalar tensor, got "
                "shape ", grad_output.sizes());
    b.go_stride_n = 0;
    b.go_stride_c = 0;
  } else if (kind == FocalKind::kSigmoid) {
    TORCH_CHECK(grad_output.dim() == 2 && grad_output.size(0) == b.rows &&
                    grad_output.size(1) == b.classes,
                op, ": grad_output must have the shape of input [", b.rows,
                ", ", b.classes, "], got ", grad_output.sizes());
    b.go_stride_n = grad_output.stride(0);
    b.go_stride_c = grad_output.stride(1);
  } else {
    TORCH_CHECK(grad_output.dim() == 1 && grad_output.size(0) == b.rows, op,
                ": grad_output must have shape [N] = [", b.rows, "], got ",
                grad_output.sizes());
    b.go_stride_n = grad_output.stride(0);
    b.go_stride_c = 0;
  }
  b.scale = (b.reduction == kMean && b.rows > 0)
                ? 1.0 / static_cast<double>(b.rows)
                : 1.0;
  b.grad_output = grad_output;
  b.input = input.contiguous();
  b.target = target.contiguous();
  b.weight = contiguous_weight(weight);
  b.grad_input = at::empty({b.rows, b.classes}, input.options());
  return b;
}

namespace {

template <typename scalar_t>
const scalar_t* weight_ptr(const at::Tensor& weight) {
  return weight.defined() ? weight.data_ptr<scalar_t>() : nullptr;
}

int64_t grain_rows(int64_t classes) {
  return std::max<int64_t>(1, 4096 / std::max<int64_t>(classes, 1));
}

at::Tensor reduce_rows(const at::Tensor& per_row, int reduction, int64_t rows) {
  at::Tensor total = per_row.sum();
  return reduction == kMean ? total.div_(static_cast<double>(rows)) : total;
}

at::Tensor focal_loss_forward_cpu_kernel(FocalKind kind,
                                         const at::Tensor& input,
                                         const at::Tensor& target, double gamma,
                                         double alpha,
                                         const std::optional<at::Tensor>& weight,
                                         c10::string_view reduction) {
  FocalLossForward f = focal_loss_prepare_forward(kind, input, target, gamma,
                                                  alpha, weight, reduction);
  TORCH_CHECK(f.input.device().is_cpu(), focal_loss_op_name(kind),
              ": the CPU kernel needs CPU tensors, got input on ",
              f.input.device());
  if (f.empty()) return focal_loss_empty_forward(f);
  focal_loss_check_targets(kind, f.target, f.classes);
  const bool sigmoid_elements =
      kind == FocalKind::kSigmoid && f.reduction == kNone;
  // Per-row losses (summed over classes for the sigmoid), reduced by at::sum.
  at::Tensor per_row = (f.reduction == kNone && kind == FocalKind::kSoftmax)
                           ? f.output
                           : at::empty({f.rows}, f.input.options());
  AT_DISPATCH_FLOATING_TYPES(f.input.scalar_type(), "focal_loss_forward_cpu", [&] {
    const scalar_t* in = f.input.data_ptr<scalar_t>();
    const int64_t* tg = f.target.data_ptr<int64_t>();
    const scalar_t* w = weight_ptr<scalar_t>(f.weight);
    const auto g = static_cast<scalar_t>(gamma);
    const auto a = static_cast<scalar_t>(alpha);
    scalar_t* loss = sigmoid_elements ? f.output.data_ptr<scalar_t>() : nullptr;
    scalar_t* row = per_row.data_ptr<scalar_t>();
    at::parallel_for(0, f.rows, grain_rows(f.classes), [&](int64_t begin, int64_t end) {
      if (kind == FocalKind::kSigmoid) {
        sigmoid_focal_loss_forward_cpu<scalar_t>(in, tg, w, f.classes, g, a,
                                                 begin, end, loss, row);
      } else {
        softmax_focal_loss_forward_cpu<scalar_t>(in, tg, w, f.classes, g, a,
                                                 begin, end, row);
      }
    });
  });
  if (f.reduction == kNone) return f.output;
  return reduce_rows(per_row, f.reduction, f.rows);
}

at::Tensor focal_loss_backward_cpu_kernel(
    FocalKind kind, const at::Tensor& grad_output, const at::Tensor& input,
    const at::Tensor& target, double gamma, double alpha,
    const std::optional<at::Tensor>& weight, c10::string_view reduction) {
  FocalLossBackward b = focal_loss_prepare_backward(
      kind, grad_output, input, target, gamma, alpha, weight, reduction);
  TORCH_CHECK(b.input.device().is_cpu(), focal_loss_op_name(kind),
              ": the CPU kernel needs CPU tensors, got input on ",
              b.input.device());
  if (b.empty()) return b.grad_input;
  focal_loss_check_targets(kind, b.target, b.classes);
  AT_DISPATCH_FLOATING_TYPES(b.input.scalar_type(), "focal_loss_backward_cpu", [&] {
    const scalar_t* go = b.grad_output.data_ptr<scalar_t>();
    const scalar_t* in = b.input.data_ptr<scalar_t>();
    const int64_t* tg = b.target.data_ptr<int64_t>();
    const scalar_t* w = weight_ptr<scalar_t>(b.weight);
    const auto g = static_cast<scalar_t>(gamma);
    const auto a = static_cast<scalar_t>(alpha);
    const auto scale = static_cast<scalar_t>(b.scale);
    scalar_t* gi = b.grad_input.data_ptr<scalar_t>();
    at::parallel_for(0, b.rows, grain_rows(b.classes), [&](int64_t begin, int64_t end) {
      if (kind == FocalKind::kSigmoid) {
        sigmoid_focal_loss_backward_cpu<scalar_t>(go, b.go_stride_n, b.go_stride_c,
                                                  scale, in, tg, w, b.classes, g,
                                                  a, begin, end, gi);
      } else {
        softmax_focal_loss_backward_cpu<scalar_t>(go, b.go_stride_n, scale, in,
                                                  tg, w, b.classes, g, a, begin,
                                                  end, gi);
      }
    });
  });
  return b.grad_input;
}

// The schema's ops, one per kind (the kind is a template argument so that
// each registers as a plain function).
template <FocalKind kKind>
at::Tensor forward_cpu_op(const at::Tensor& input, const at::Tensor& target,
                          double gamma, double alpha,
                          const std::optional<at::Tensor>& weight,
                          c10::string_view reduction) {
  if (is_reduced_float(input)) {
    check_inputs(kKind, input, target, gamma, alpha, weight, reduction);
    return focal_loss_forward_cpu_kernel(kKind, input.to(at::kFloat), target,
                                         gamma, alpha, float_if_reduced(weight),
                                         reduction)
        .to(input.scalar_type());
  }
  return focal_loss_forward_cpu_kernel(kKind, input, target, gamma, alpha,
                                       weight, reduction);
}

template <FocalKind kKind>
at::Tensor backward_cpu_op(const at::Tensor& grad_output,
                           const at::Tensor& input, const at::Tensor& target,
                           double gamma, double alpha,
                           const std::optional<at::Tensor>& weight,
                           c10::string_view reduction) {
  if (is_reduced_float(input)) {
    check_inputs(kKind, input, target, gamma, alpha, weight, reduction);
    check_same_dtype(input, grad_output, focal_loss_op_name(kKind), "input",
                     "grad_output");
    return focal_loss_backward_cpu_kernel(
               kKind, grad_output.to(at::kFloat), input.to(at::kFloat), target,
               gamma, alpha, float_if_reduced(weight), reduction)
        .to(input.scalar_type());
  }
  return focal_loss_backward_cpu_kernel(kKind, grad_output, input, target,
                                        gamma, alpha, weight, reduction);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(visdet_ops, m) {
  m.def(
      "sigmoid_focal_loss(Tensor input, Tensor target, float gamma, "
      "float alpha, Tensor? weight, str reduction) -> Tensor");
  m.def(
      "_sigmoid_focal_loss_backward(Tensor grad_output, Tensor input, "
      "Tensor target, float gamma, float alpha, Tensor? weight, "
      "str reduction) -> Tensor");
  m.def(
      "softmax_focal_loss(Tensor input, Tensor target, float gamma, "
      "float alpha, Tensor? weight, str reduction) -> Tensor");
  m.def(
      "_softmax_focal_loss_backward(Tensor grad_output, Tensor input, "
      "Tensor target, float gamma, float alpha, Tensor? weight, "
      "str reduction) -> Tensor");
}

TORCH_LIBRARY_IMPL(visdet_ops, CPU, m) {
  m.impl("sigmoid_focal_loss", &forward_cpu_op<FocalKind::kSigmoid>);
  m.impl("_sigmoid_focal_loss_backward", &backward_cpu_op<FocalKind::kSigmoid>);
  m.impl("softmax_focal_loss", &forward_cpu_op<FocalKind::kSoftmax>);
  m.impl("_softmax_focal_loss_backward", &backward_cpu_op<FocalKind::kSoftmax>);
}

}  // namespace visdet_ops
