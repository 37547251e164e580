// The prepared arguments of sigmoid_focal_loss and softmax_focal_loss, shared
// by the CPU and CUDA host layers. Written against the host adapter
// (common/host.h): one source for the classic and the stable build.
#pragma once

#include <optional>
#include <tuple>

#include "common/host.h"
#include "focal_loss_launch.h"

namespace visdet_ops {

enum class FocalKind { kSigmoid, kSoftmax };

const char* focal_loss_op_name(FocalKind kind);

// The checks every forward and backward starts with (input, target, weight,
// gamma, alpha, reduction); returns the reduction (focal_loss_detail's
// Reduction). The prepare functions call it; so does the CPU's 16-bit path,
// before it converts its inputs to float32.
int focal_loss_check_inputs(FocalKind kind, const host::Tensor& input,
                            const host::Tensor& target, double gamma,
                            double alpha,
                            const std::optional<host::Tensor>& weight,
                            host::StringArg reduction);

// A forward, checked and allocated once for every device: contiguous inputs
// (weight only when has_weight) and the uninitialised output ([N, C] sigmoid
// / [N] softmax for reduction 'none', [] otherwise).
struct FocalLossForward {
  FocalKind kind;
  int reduction;  // focal_loss_detail::Reduction
  int64_t rows, classes;
  double gamma, alpha;
  host::Tensor input, target, weight;
  bool has_weight = false;
  host::Tensor output;
  // The forward that also writes the gradient of the reduced loss (the
  // _<kind>_focal_loss_forward_with_grad ops): grad [rows, classes], the
  // gradient for a grad_output of 1, and its scale (1 / rows for 'mean').
  bool with_grad = false;
  double grad_scale = 1.0;
  host::Tensor grad;
  // No logit to compute: N == 0 or C == 0.
  bool empty() const { return rows == 0 || classes == 0; }
};

FocalLossForward focal_loss_prepare_forward(
    FocalKind kind, const host::Tensor& input, const host::Tensor& target,
    double gamma, double alpha, const std::optional<host::Tensor>& weight,
    host::StringArg reduction, bool with_grad = false);

// grad_output of the reduced loss (a scalar of grad's dtype and device),
// checked for _focal_loss_scale_grad_.
void focal_loss_check_scale_grad(const host::Tensor& grad,
                                 const host::Tensor& grad_output);

// The result of an empty forward (checks the targets first): zeros for
// 'none' and 'sum'; for 'mean' the sum divided by N, so NaN for N == 0 as in
// mmcv (0 / 0) and torch.mean of an empty tensor.
host::Tensor focal_loss_empty_forward(const FocalLossForward& f);

// Raises the op's target error when a target is out of range (sigmoid:
// [0, C], C = background; softmax: < C, negative = ignored). One aminmax, so a
// device-to-host copy on CUDA: called there only once the kernel has flagged
// a bad target.
void focal_loss_check_targets(FocalKind kind, const host::Tensor& target,
                              int64_t classes);

// Whether VISDET_OPS_SYNC_TARGET_CHECKS=1 (read on every call): the CUDA
// forward then makes the host wait for its kernel's bad-target flag and raises
// the target error; without it a bad target gives NaN loss and gradients on
// CUDA (CPU targets are always checked, which costs no device sync).
bool sync_target_checks_enabled();

// A backward: grad_output keeps its strides (an expanded grad is read in
// place, never materialised); scale is 1 / N for 'mean', else 1; grad_input
// is [N, C], contiguous, uninitialised.
struct FocalLossBackward {
  FocalKind kind;
  int reduction;
  int64_t rows, classes;
  double gamma, alpha, scale;
  int64_t go_stride_n, go_stride_c;
  host::Tensor grad_output, input, target, weight;
  bool has_weight = false;
  host::Tensor grad_input;
  bool empty() const { return rows == 0 || classes == 0; }
};

FocalLossBackward focal_loss_prepare_backward(
    FocalKind kind, const host::Tensor& grad_output, const host::Tensor& input,
    const host::Tensor& target, double gamma, double alpha,
    const std::optional<host::Tensor>& weight, host::StringArg reduction);

// The two registered forwards of a kind, written once over a device's forward
// kForward(input, target, gamma, alpha, weight, reduction, with_grad) ->
// (loss, gradient of the reduced loss or undefined): focal_loss_cpu_host.cpp
// and focal_loss_cuda_host.cpp each register the instances over their own
// focal_loss_forward_{cpu,cuda}<kind>.
//
// sigmoid_focal_loss / softmax_focal_loss: the loss alone.
template <auto kForward>
host::Tensor focal_loss_forward_kernel(
    const host::Tensor& input, const host::Tensor& target, double gamma,
    double alpha, const std::optional<host::Tensor>& weight,
    host::StringArg reduction) {
  return std::get<0>(
      kForward(input, target, gamma, alpha, weight, reduction, false));
}

// _sigmoid_focal_loss_forward_with_grad and its softmax twin: the loss and the
// gradient of the reduced loss, in one pass.
template <auto kForward>
std::tuple<host::Tensor, host::Tensor> focal_loss_forward_with_grad_kernel(
    const host::Tensor& input, const host::Tensor& target, double gamma,
    double alpha, const std::optional<host::Tensor>& weight,
    host::StringArg reduction) {
  return kForward(input, target, gamma, alpha, weight, reduction, true);
}

}  // namespace visdet_ops
