// deform_roi_pool: CUDA host layer (torch-facing). Device code:
// deform_roi_pool_cuda.cu.
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/OpMathType.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "common/cuda_types.h"
#include "deform_roi_pool.h"

namespace visdet_ops {
namespace {

at::Tensor deform_roi_pool_forward_cuda_kernel(
    const at::Tensor& input, const at::Tensor& rois,
    const std::optional<at::Tensor>& offset, int64_t pooled_height,
    int64_t pooled_width, double spatial_scale, int64_t sampling_ratio,
    double gamma) {
  const c10::cuda::CUDAGuard device_guard(input.device());
  const DeformRoIPoolForward f = deform_roi_pool_prepare_forward(
      input, rois, offset, pooled_height, pooled_width, spatial_scale,
      sampling_ratio, gamma);
  if (f.shape.output_numel() == 0) return f.output;
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, input.scalar_type(),
      "deform_roi_pool_forward_cuda", [&] {
        using compute_t = at::opmath_type<scalar_t>;
        C10_CUDA_CHECK(deform_roi_pool_forward_cuda_launch(
            cuda_data_or_null<scalar_t>(f.input), f.rois.const_data_ptr<compute_t>(),
            cuda_data_or_null<scalar_t>(f.offset), f.shape,
            static_cast<compute_t>(spatial_scale),
            static_cast<compute_t>(gamma),
            cuda_mutable_data<scalar_t>(f.output), stream));
      });
  return f.output;
}

std::tuple<at::Tensor, at::Tensor> deform_roi_pool_backward_cuda_kernel(
    const at::Tensor& grad_output, const at::Tensor& input,
    const at::Tensor& rois, const std::optional<at::Tensor>& offset,
    double spatial_scale, int64_t sampling_ratio, double gamma) {
  const c10::cuda::CUDAGuard device_guard(input.device());
  const DeformRoIPoolBackward b = deform_roi_pool_prepare_backward(
      grad_output, input, rois, offset, spatial_scale, sampling_ratio, gamma);
  // The input gradient is accumulated with atomicAdd: the summation order,
  // and so the last bits, vary from run to run. (The offset gradient alone
  // would be deterministic.)
  at::globalContext().alertNotDeterministic("deform_roi_pool_backward_cuda");
  if (b.shape.output_numel() == 0) {
    b.grad_offset.zero_();
    return b.outputs();
  }
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, input.scalar_type(),
      "deform_roi_pool_backward_cuda", [&] {
        using compute_t = at::opmath_type<scalar_t>;
        C10_CUDA_CHECK(deform_roi_pool_backward_cuda_launch(
            cuda_data_or_null<scalar_t>(b.grad_output),
            cuda_data_or_null<scalar_t>(b.input), b.rois.const_data_ptr<compute_t>(),
            cuda_data_or_null<scalar_t>(b.offset), b.shape,
            static_cast<compute_t>(spatial_scale),
            static_cast<compute_t>(gamma),
            b.grad_input.mutable_data_ptr<compute_t>(),
            b.offset.defined() ? cuda_mutable_data<scalar_t>(b.grad_offset)
                               : nullptr,
            stream));
      });
  return b.outputs();
}

}  // namespace

TORCH_LIBRARY_IMPL(visdet_ops, CUDA, m) {
  m.impl("deform_roi_pool", &deform_roi_pool_forward_cuda_kernel);
  m.impl("_deform_roi_pool_backward", &deform_roi_pool_backward_cuda_kernel);
}

}  // namespace visdet_ops
