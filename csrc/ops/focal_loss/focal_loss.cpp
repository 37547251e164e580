// sigmoid_focal_loss / softmax_focal_loss: schema, and the argument checks and
// prepare steps shared by all devices. Each device registers from its own host
// file: focal_loss_cpu_host.cpp and focal_loss_cuda_host.cpp. One source for
// the classic and the stable build (common/host.h). Autograd and autocast are
// registered in visdet_ops/ops/focal_loss.py.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <tuple>

#include "common/checks.h"
#include "common/host.h"
#include "focal_loss.h"
#include "focal_loss_kernel.h"

namespace visdet_ops {
namespace {

using focal_loss_detail::kMean;
using focal_loss_detail::kNone;
using focal_loss_detail::kSum;
using host::ScalarType;
using host::Tensor;

int parse_reduction(const char* op, host::StringArg reduction) {
  if (reduction == "none") return kNone;
  if (reduction == "mean") return kMean;
  if (reduction == "sum") return kSum;
  VISDET_CHECK(false, op, ": reduction must be 'none', 'mean' or 'sum', got '",
               std::string(reduction), "'");
  return kNone;  // not reached
}

bool has_tensor(const std::optional<Tensor>& t) {
  return t.has_value() && t->defined();
}

}  // namespace

int focal_loss_check_inputs(FocalKind kind, const Tensor& input,
                            const Tensor& target, double gamma, double alpha,
                            const std::optional<Tensor>& weight,
                            host::StringArg reduction) {
  const char* op = focal_loss_op_name(kind);
  check_dim(input, 2, op, "input");
  check_floating(input, op, "input");
  check_dim(target, 1, op, "target");
  VISDET_CHECK(host::dtype_of(target) == ScalarType::Long, op,
               ": target must be an int64 tensor of class indices, got ",
               host::dtype_of(target));
  VISDET_CHECK(target.size(0) == input.size(0), op,
               ": target must have shape [N] with N = input.size(0) = ",
               input.size(0), ", got ", host::shape_of(target));
  check_same_device(input, target, op, "input", "target");
  if (has_tensor(weight)) {
    VISDET_CHECK(weight->dim() == 1 && weight->size(0) == input.size(1), op,
                 ": weight must have shape [C] = [", input.size(1),
                 "] (one weight per class), got ", host::shape_of(*weight));
    check_same_dtype(input, *weight, op, "input", "weight");
    check_same_device(input, *weight, op, "input", "weight");
  }
  VISDET_CHECK(std::isfinite(gamma) && gamma >= 0, op,
               ": gamma must be a non-negative finite number, got ", gamma);
  VISDET_CHECK(std::isfinite(alpha), op,
               ": alpha must be a finite number, got ", alpha);
  return parse_reduction(op, reduction);
}

const char* focal_loss_op_name(FocalKind kind) {
  return kind == FocalKind::kSigmoid ? "sigmoid_focal_loss"
                                     : "softmax_focal_loss";
}

FocalLossForward focal_loss_prepare_forward(
    FocalKind kind, const Tensor& input, const Tensor& target, double gamma,
    double alpha, const std::optional<Tensor>& weight,
    host::StringArg reduction, bool with_grad) {
  FocalLossForward f;
  f.kind = kind;
  f.reduction =
      focal_loss_check_inputs(kind, input, target, gamma, alpha, weight,
                              reduction);
  VISDET_CHECK(!with_grad || f.reduction != kNone, "_",
               focal_loss_op_name(kind),
               "_forward_with_grad: reduction must be 'mean' or 'sum' (the "
               "gradient it writes is that of the reduced loss), got 'none'");
  f.rows = input.size(0);
  f.classes = input.size(1);
  f.gamma = gamma;
  f.alpha = alpha;
  f.input = host::contiguous(input);
  f.target = host::contiguous(target);
  f.has_weight = has_tensor(weight);
  if (f.has_weight) f.weight = host::contiguous(*weight);
  const ScalarType dtype = host::dtype_of(input);
  if (f.reduction != kNone) {
    f.output = host::empty({}, dtype, input);
  } else if (kind == FocalKind::kSigmoid) {
    f.output = host::empty({f.rows, f.classes}, dtype, input);
  } else {
    f.output = host::empty({f.rows}, dtype, input);
  }
  f.with_grad = with_grad;
  if (with_grad) {
    f.grad = host::empty({f.rows, f.classes}, dtype, input);
    f.grad_scale = (f.reduction == kMean && f.rows > 0)
                       ? 1.0 / static_cast<double>(f.rows)
                       : 1.0;
  }
  return f;
}

void focal_loss_check_scale_grad(const Tensor& grad,
                                 const Tensor& grad_output) {
  const char* op = "_focal_loss_scale_grad_";
  check_dim(grad, 2, op, "grad_input");
  VISDET_CHECK(grad.is_contiguous(), op,
               ": grad_input must be contiguous (the buffer the forward "
               "wrote)");
  VISDET_CHECK(grad_output.dim() == 0, op,
               ": grad_output of a reduced loss must be a scalar tensor, got "
               "shape ",
               host::shape_of(grad_output));
  check_same_dtype(grad, grad_output, op, "grad_input", "grad_output");
  check_same_device(grad, grad_output, op, "grad_input", "grad_output");
}

Tensor focal_loss_empty_forward(const FocalLossForward& f) {
  focal_loss_check_targets(f.kind, f.target, f.classes);
  const double value = (f.reduction == kMean && f.rows == 0)
                           ? std::numeric_limits<double>::quiet_NaN()
                           : 0.0;
  return host::fill(f.output, value);
}

void focal_loss_check_targets(FocalKind kind, const Tensor& target,
                              int64_t classes) {
  if (target.numel() == 0) return;
  const char* op = focal_loss_op_name(kind);
  int64_t lo = 0, hi = 0;
  if (host::is_cpu(target) && target.is_contiguous()) {
    // A CPU target is read where it is: no aminmax op and no two scalar reads
    // (a boxed dispatcher call each in the stable build).
    const int64_t* t = host::const_data<int64_t>(target);
    const auto range = std::minmax_element(t, t + target.numel());
    lo = *range.first;
    hi = *range.second;
  } else {
    const auto minmax = host::aminmax(target);
    lo = host::read_scalar<int64_t>(std::get<0>(minmax));
    hi = host::read_scalar<int64_t>(std::get<1>(minmax));
  }
  if (kind == FocalKind::kSigmoid) {
    VISDET_CHECK(lo >= 0 && hi <= classes, op,
                 ": target values must lie in [0, num_classes] = [0, ",
                 classes, "] (num_classes marks background), got values in [",
                 lo, ", ", hi, "]");
  } else {
    VISDET_CHECK(hi < classes, op, ": target values must be < num_classes = ",
                 classes,
                 " (negative values mark ignored rows), got a maximum of ", hi);
  }
}

bool sync_target_checks_enabled() {
  return sync_checks_enabled("VISDET_OPS_SYNC_TARGET_CHECKS");
}

FocalLossBackward focal_loss_prepare_backward(
    FocalKind kind, const Tensor& grad_output, const Tensor& input,
    const Tensor& target, double gamma, double alpha,
    const std::optional<Tensor>& weight, host::StringArg reduction) {
  const char* op = focal_loss_op_name(kind);
  FocalLossBackward b;
  b.kind = kind;
  b.reduction =
      focal_loss_check_inputs(kind, input, target, gamma, alpha, weight,
                              reduction);
  check_same_dtype(input, grad_output, op, "input", "grad_output");
  check_same_device(input, grad_output, op, "input", "grad_output");
  b.rows = input.size(0);
  b.classes = input.size(1);
  b.gamma = gamma;
  b.alpha = alpha;
  if (b.reduction != kNone) {
    VISDET_CHECK(grad_output.dim() == 0, op,
                 ": grad_output of a reduced loss must be a scalar tensor, "
                 "got shape ",
                 host::shape_of(grad_output));
    b.go_stride_n = 0;
    b.go_stride_c = 0;
  } else if (kind == FocalKind::kSigmoid) {
    VISDET_CHECK(grad_output.dim() == 2 && grad_output.size(0) == b.rows &&
                     grad_output.size(1) == b.classes,
                 op, ": grad_output must have the shape of input [", b.rows,
                 ", ", b.classes, "], got ", host::shape_of(grad_output));
    b.go_stride_n = grad_output.stride(0);
    b.go_stride_c = grad_output.stride(1);
  } else {
    VISDET_CHECK(grad_output.dim() == 1 && grad_output.size(0) == b.rows, op,
                 ": grad_output must have shape [N] = [", b.rows, "], got ",
                 host::shape_of(grad_output));
    b.go_stride_n = grad_output.stride(0);
    b.go_stride_c = 0;
  }
  b.scale = (b.reduction == kMean && b.rows > 0)
                ? 1.0 / static_cast<double>(b.rows)
                : 1.0;
  b.grad_output = grad_output;
  b.input = host::contiguous(input);
  b.target = host::contiguous(target);
  b.has_weight = has_tensor(weight);
  if (b.has_weight) b.weight = host::contiguous(*weight);
  b.grad_input =
      host::empty({b.rows, b.classes}, host::dtype_of(input), input);
  return b;
}

VISDET_LIBRARY_FRAGMENT(m) {
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
  // The fused training forward (docs/ops.md, focal_loss): the loss and the
  // gradient of the reduced loss in one pass; the backward scales it in place.
  m.def(
      "_sigmoid_focal_loss_forward_with_grad(Tensor input, Tensor target, "
      "float gamma, float alpha, Tensor? weight, str reduction) -> (Tensor, "
      "Tensor)");
  m.def(
      "_softmax_focal_loss_forward_with_grad(Tensor input, Tensor target, "
      "float gamma, float alpha, Tensor? weight, str reduction) -> (Tensor, "
      "Tensor)");
  m.def("_focal_loss_scale_grad_(Tensor(a!) grad_input, Tensor grad_output) "
        "-> ()");
}

}  // namespace visdet_ops
