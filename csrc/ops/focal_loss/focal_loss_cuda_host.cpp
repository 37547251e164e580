// sigmoid_focal_loss / softmax_focal_loss: CUDA host layer (torch-facing,
// through the host adapter). Device code: focal_loss_cuda.cu.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <optional>
#include <tuple>

#include "common/checks.h"
#include "common/host.h"
#include "common/host_cuda.h"
#include "focal_loss.h"
#include "focal_loss_kernel.h"
#include "focal_loss_launch.h"

namespace visdet_ops {
namespace {

using host::ScalarType;
using host::Tensor;

// The CUDA kernel runs when any argument is on a GPU: name the one that is not.
void check_on_cuda(FocalKind kind, const Tensor& input, const Tensor& target,
                   const std::optional<Tensor>& weight) {
  const char* op = focal_loss_op_name(kind);
  check_same_device(input, target, op, "input", "target");
  if (weight.has_value() && weight->defined()) {
    check_same_device(input, *weight, op, "input", "weight");
  }
  VISDET_CHECK(host::is_cuda(input), op,
               ": the CUDA kernel needs CUDA tensors, got input on ",
               host::device_of(input));
}

// The device's forward of a kind: the loss and, with_grad, the gradient of
// the reduced loss (else undefined). focal_loss.h registers the loss-only and
// the with-grad op over it; the kind is a template argument so that each
// registers as a plain function.
template <FocalKind kKind>
std::tuple<Tensor, Tensor> focal_loss_forward_cuda(
    const Tensor& input, const Tensor& target, double gamma, double alpha,
    const std::optional<Tensor>& weight, host::StringArg reduction,
    bool with_grad) {
  check_on_cuda(kKind, input, target, weight);
  const host::CudaDeviceGuard device_guard(input);
  FocalLossForward f = focal_loss_prepare_forward(
      kKind, input, target, gamma, alpha, weight, reduction, with_grad);
  if (f.empty()) return {focal_loss_empty_forward(f), f.grad};
  // Without VISDET_OPS_SYNC_TARGET_CHECKS=1 the host does not wait for the
  // kernel: a row with an out-of-range target gets a NaN loss (so a NaN
  // 'mean' / 'sum') and NaN gradients, never an out-of-bounds read. With it,
  // the kernel raises a flag and a 4-byte copy turns it into an error naming
  // the argument (a host sync, which also breaks CUDA graph capture).
  const bool sync_check = sync_target_checks_enabled();
  const bool has_workspace =
      sync_check || f.reduction != focal_loss_detail::kNone;
  Tensor workspace;
  if (has_workspace) {
    workspace = host::empty({focal_loss_cuda_workspace_words()},
                            ScalarType::Int, f.input);
  }
  int32_t* workspace_ptr =
      has_workspace ? host::mutable_data<int32_t>(workspace) : nullptr;
  const cudaStream_t stream = host::current_cuda_stream(input);
  host::dispatch_floating_types<__half, __nv_bfloat16>(
      host::dtype_of(f.input), "focal_loss_forward_cuda", [&](auto tag) {
        using T = typename decltype(tag)::type;
        const auto launch = kKind == FocalKind::kSigmoid
                                ? &sigmoid_focal_loss_forward_cuda_launch<T>
                                : &softmax_focal_loss_forward_cuda_launch<T>;
        VISDET_CUDA_CHECK(launch(
            host::const_data<T>(f.input), host::const_data<int64_t>(f.target),
            f.has_weight ? host::const_data<T>(f.weight) : nullptr, f.rows,
            f.classes, gamma, alpha, f.reduction,
            host::mutable_data<T>(f.output), workspace_ptr, sync_check,
            f.grad_scale, f.with_grad ? host::mutable_data<T>(f.grad) : nullptr,
            stream));
      });
  if (sync_check &&
      host::read_scalar<int32_t>(host::narrow(workspace, 0, 0, 1)) != 0) {
    focal_loss_check_targets(kKind, f.target, f.classes);
    VISDET_CHECK(false, focal_loss_op_name(kKind),
                 ": internal error: the CUDA kernel flagged a target that the "
                 "host check accepts");
  }
  return {f.output, f.grad};
}

template <FocalKind kKind>
Tensor focal_loss_backward_cuda_kernel(
    const Tensor& grad_output, const Tensor& input, const Tensor& target,
    double gamma, double alpha, const std::optional<Tensor>& weight,
    host::StringArg reduction) {
  check_on_cuda(kKind, input, target, weight);
  check_same_device(input, grad_output, focal_loss_op_name(kKind), "input",
                    "grad_output");
  const host::CudaDeviceGuard device_guard(input);
  FocalLossBackward b = focal_loss_prepare_backward(
      kKind, grad_output, input, target, gamma, alpha, weight, reduction);
  // Elementwise: each gradient is written once by one thread, no atomics, so
  // the backward is deterministic and needs no alert.
  if (b.empty()) return b.grad_input;
  const cudaStream_t stream = host::current_cuda_stream(input);
  host::dispatch_floating_types<__half, __nv_bfloat16>(
      host::dtype_of(b.input), "focal_loss_backward_cuda", [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* go = host::const_data<T>(b.grad_output);
        const T* in = host::const_data<T>(b.input);
        const int64_t* tg = host::const_data<int64_t>(b.target);
        const T* w = b.has_weight ? host::const_data<T>(b.weight) : nullptr;
        T* gi = host::mutable_data<T>(b.grad_input);
        if (kKind == FocalKind::kSigmoid) {
          VISDET_CUDA_CHECK(sigmoid_focal_loss_backward_cuda_launch<T>(
              go, b.go_stride_n, b.go_stride_c, b.scale, in, tg, w, b.rows,
              b.classes, gamma, alpha, gi, stream));
        } else {
          VISDET_CUDA_CHECK(softmax_focal_loss_backward_cuda_launch<T>(
              go, b.go_stride_n, b.scale, in, tg, w, b.rows, b.classes, gamma,
              alpha, gi, stream));
        }
      });
  return b.grad_input;
}

// grad_input *= grad_output with grad_output read on the device: no host
// sync, and nothing to do where it is 1 (loss.backward()).
void focal_loss_scale_grad_cuda_kernel(const Tensor& grad_input,
                                       const Tensor& grad_output) {
  focal_loss_check_scale_grad(grad_input, grad_output);
  VISDET_CHECK(host::is_cuda(grad_input), "_focal_loss_scale_grad_",
               ": the CUDA kernel needs CUDA tensors, got grad_input on ",
               host::device_of(grad_input));
  if (grad_input.numel() == 0) return;
  const host::CudaDeviceGuard device_guard(grad_input);
  const cudaStream_t stream = host::current_cuda_stream(grad_input);
  host::dispatch_floating_types<__half, __nv_bfloat16>(
      host::dtype_of(grad_input), "_focal_loss_scale_grad_", [&](auto tag) {
        using T = typename decltype(tag)::type;
        VISDET_CUDA_CHECK(focal_loss_scale_grad_cuda_launch<T>(
            host::mutable_data<T>(grad_input), grad_input.numel(),
            host::const_data<T>(grad_output), stream));
      });
}

}  // namespace

VISDET_LIBRARY_IMPL(CUDA, m) {
  m.impl("_sigmoid_focal_loss_forward_with_grad",
         VISDET_KERNEL(focal_loss_forward_with_grad_kernel<
                       focal_loss_forward_cuda<FocalKind::kSigmoid>>));
  m.impl("_softmax_focal_loss_forward_with_grad",
         VISDET_KERNEL(focal_loss_forward_with_grad_kernel<
                       focal_loss_forward_cuda<FocalKind::kSoftmax>>));
  m.impl("_focal_loss_scale_grad_",
         VISDET_KERNEL(focal_loss_scale_grad_cuda_kernel));
}
VISDET_IMPL_WITH_BACKWARD(
    CUDA, sigmoid_focal_loss,
    focal_loss_forward_kernel<focal_loss_forward_cuda<FocalKind::kSigmoid>>,
    focal_loss_backward_cuda_kernel<FocalKind::kSigmoid>)
VISDET_IMPL_WITH_BACKWARD(
    CUDA, softmax_focal_loss,
    focal_loss_forward_kernel<focal_loss_forward_cuda<FocalKind::kSoftmax>>,
    focal_loss_backward_cuda_kernel<FocalKind::kSoftmax>)

}  // namespace visdet_ops
