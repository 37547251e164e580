// sigmoid_focal_loss / softmax_focal_loss: CUDA host layer (torch-facing).
// Device code: focal_loss_cuda.cu.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "common/checks.h"
#include "common/cuda_types.h"
#include "focal_loss.h"
#include "focal_loss_kernel.h"
#include "focal_loss_launch.h"

namespace visdet_ops {
namespace {

// The CUDA kernel runs when any argument is on a GPU: name the one that is not.
void check_on_cuda(FocalKind kind, const at::Tensor& input,
                   const at::Tensor& target,
                   const std::optional<at::Tensor>& weight) {
  const char* op = focal_loss_op_name(kind);
  check_same_device(input, target, op, "input", "target");
  if (weight.has_value() && weight->defined()) {
    check_same_device(input, *weight, op, "input", "weight");
  }
  TORCH_CHECK(input.is_cuda(), op,
              ": the CUDA kernel needs CUDA tensors, got input on ",
              input.device());
}

at::Tensor focal_loss_forward_cuda_kernel(
    FocalKind kind, const at::Tensor& input, const at::Tensor& target,
    double gamma, double alpha, const std::optional<at::Tensor>& weight,
    c10::string_view reduction) {
  check_on_cuda(kind, input, target, weight);
  const c10::cuda::CUDAGuard device_guard(input.device());
  FocalLossForward f = focal_loss_prepare_forward(kind, input, target, gamma,
                                                  alpha, weight, reduction);
  if (f.empty()) return focal_loss_empty_forward(f);
  // Without VISDET_OPS_SYNC_TARGET_CHECKS=1 the host does not wait for the
  // kernel: a row with an out-of-range target gets a NaN loss (so a NaN
  // 'mean' / 'sum') and NaN gradients, never an out-of-bounds read. With it,
  // the kernel raises a flag and a 4-byte copy turns it into an error naming
  // the argument (a host sync, which also breaks CUDA graph capture).
  const bool sync_check = sync_target_checks_enabled();
  at::Tensor workspace;
  if (sync_check || f.reduction != focal_loss_detail::kNone) {
    workspace = at::empty({focal_loss_cuda_workspace_words()},
                          f.input.options().dtype(at::kInt));
  }
  int32_t* workspace_ptr =
      workspace.defined() ? workspace.mutable_data_ptr<int32_t>() : nullptr;
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, f.input.scalar_type(), "focal_loss_forward_cuda", [&] {
        const auto launch = kind == FocalKind::kSigmoid
                                ? &sigmoid_focal_loss_forward_cuda_launch<
                                      cuda_t<scalar_t>>
                                : &softmax_focal_loss_forward_cuda_launch<
                                      cuda_t<scalar_t>>;
        C10_CUDA_CHECK(launch(cuda_data_or_null<scalar_t>(f.input),
                              f.target.const_data_ptr<int64_t>(),
                              cuda_data_or_null<scalar_t>(f.weight), f.rows, f.classes,
                              gamma, alpha, f.reduction,
                              cuda_mutable_data<scalar_t>(f.output),
                              workspace_ptr, sync_check, stream));
      });
  if (sync_check && workspace[0].item<int32_t>() != 0) {
    focal_loss_check_targets(kind, f.target, f.classes);
    TORCH_CHECK(false, focal_loss_op_name(kind),
                ": internal error: the CUDA kernel flagged a target that the "
                "host check accepts");
  }
  return f.output;
}

at::Tensor focal_loss_backward_cuda_kernel(
    FocalKind kind, const at::Tensor& grad_output, const at::Tensor& input,
    const at::Tensor& target, double gamma, double alpha,
    const std::optional<at::Tensor>& weight, c10::string_view reduction) {
  check_on_cuda(kind, input, target, weight);
  check_same_device(input, grad_output, focal_loss_op_name(kind), "input",
                    "grad_output");
  const c10::cuda::CUDAGuard device_guard(input.device());
  FocalLossBackward b = focal_loss_prepare_backward(
      kind, grad_output, input, target, gamma, alpha, weight, reduction);
  // Elementwise: each gradient is written once by one thread, no atomics, so
  // the backward is deterministic and needs no alert.
  if (b.empty()) return b.grad_input;
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, b.input.scalar_type(), "focal_loss_backward_cuda", [&] {
        using storage = cuda_t<scalar_t>;
        const storage* go = cuda_data_or_null<scalar_t>(b.grad_output);
        if (kind == FocalKind::kSigmoid) {
          C10_CUDA_CHECK(sigmoid_focal_loss_backward_cuda_launch<storage>(
              go, b.go_stride_n, b.go_stride_c, b.scale,
              cuda_data_or_null<scalar_t>(b.input), b.target.const_data_ptr<int64_t>(),
              cuda_data_or_null<scalar_t>(b.weight), b.rows, b.classes, gamma, alpha,
              cuda_mutable_data<scalar_t>(b.grad_input), stream));
        } else {
          C10_CUDA_CHECK(softmax_focal_loss_backward_cuda_launch<storage>(
              go, b.go_stride_n, b.scale, cuda_data_or_null<scalar_t>(b.input),
              b.target.const_data_ptr<int64_t>(), cuda_data_or_null<scalar_t>(b.weight),
              b.rows, b.classes, gamma, alpha,
              cuda_mutable_data<scalar_t>(b.grad_input), stream));
        }
      });
  return b.grad_input;
}

// The schema's ops, one per kind (the kind is a template argument so that
// each registers as a plain function).
template <FocalKind kKind>
at::Tensor forward_cuda_op(const at::Tensor& input, const at::Tensor& target,
                           double gamma, double alpha,
                           const std::optional<at::Tensor>& weight,
                           c10::string_view reduction) {
  return focal_loss_forward_cuda_kernel(kKind, input, target, gamma, alpha,
                                        weight, reduction);
}

template <FocalKind kKind>
at::Tensor backward_cuda_op(const at::Tensor& grad_output,
                            const at::Tensor& input, const at::Tensor& target,
                            double gamma, double alpha,
                            const std::optional<at::Tensor>& weight,
                            c10::string_view reduction) {
  return focal_loss_backward_cuda_kernel(kKind, grad_output, input, target,
                                         gamma, alpha, weight, reduction);
}

}  // namespace

TORCH_LIBRARY_IMPL(visdet_ops, CUDA, m) {
  m.impl("sigmoid_focal_loss", &forward_cuda_op<FocalKind::kSigmoid>);
  m.impl("_sigmoid_focal_loss_backward", &backward_cuda_op<FocalKind::kSigmoid>);
  m.impl("softmax_focal_loss", &forward_cuda_op<FocalKind::kSoftmax>);
  m.impl("_softmax_focal_loss_backward", &backward_cuda_op<FocalKind::kSoftmax>);
}

}  // namespace visdet_ops
