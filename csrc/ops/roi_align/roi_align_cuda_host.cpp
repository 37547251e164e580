// roi_align: CUDA host layer (torch-facing). Device code: roi_align_cuda.cu.
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "common/cuda_types.h"
#include "roi_align.h"

namespace visdet_ops {
namespace {

std::tuple<at::Tensor, at::Tensor, at::Tensor> roi_align_forward_cuda_kernel(
    const at::Tensor& input, const at::Tensor& rois, int64_t pooled_height,
    int64_t pooled_width, double spatial_scale, int64_t sampling_ratio,
    c10::string_view pool_mode, bool aligned) {
  const c10::cuda::CUDAGuard device_guard(input.device());
  const RoIAlignForward f =
      roi_align_prepare_forward(input, rois, pooled_height, pooled_width,
                                spatial_scale, sampling_ratio, pool_mode,
                                aligned);
  if (f.shape.output_numel() == 0) return f.outputs();
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, input.scalar_type(), "roi_align_forward_cuda",
      [&] {
        using T = cuda_t<scalar_t>;
        using A = acc_t<T>;
        C10_CUDA_CHECK(roi_align_forward_cuda_launch<T>(
            cuda_data<scalar_t>(f.input), f.rois.const_data_ptr<A>(),
            f.shape, spatial_scale, cuda_mutable_data<scalar_t>(f.output),
            f.is_max() ? f.argmax_y.mutable_data_ptr<A>() : nullptr,
            f.is_max() ? f.argmax_x.mutable_data_ptr<A>() : nullptr, stream));
      });
  return f.outputs();
}

at::Tensor roi_align_backward_cuda_kernel(
    const at::Tensor& grad_output, const at::Tensor& rois,
    const at::Tensor& argmax_y, const at::Tensor& argmax_x,
    int64_t batch_size, int64_t channels, int64_t height, int64_t width,
    double spatial_scale, int64_t sampling_ratio, c10::string_view pool_mode,
    bool aligned) {
  const c10::cuda::CUDAGuard device_guard(grad_output.device());
  const RoIAlignBackward b = roi_align_prepare_backward(
      grad_output, rois, argmax_y, argmax_x, batch_size, channels, height,
      width, spatial_scale, sampling_ratio, pool_mode, aligned);
  // atomicAdd makes the summation order, and so the last bits, vary.
  at::globalContext().alertNotDeterministic("visdet_ops::roi_align backward (CUDA)");
  if (b.shape.output_numel() == 0) return b.grad_input();
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, grad_output.scalar_type(),
      "roi_align_backward_cuda", [&] {
        using T = cuda_t<scalar_t>;
        using A = acc_t<T>;
        C10_CUDA_CHECK(roi_align_backward_cuda_launch<T>(
            cuda_data<scalar_t>(b.grad_output), b.rois.const_data_ptr<A>(),
            b.is_max() ? b.argmax_y.const_data_ptr<A>() : nullptr,
            b.is_max() ? b.argmax_x.const_data_ptr<A>() : nullptr, b.shape,
            spatial_scale, b.grad_accum.mutable_data_ptr<A>(), stream));
      });
  return b.grad_input();
}

}  // namespace

TORCH_LIBRARY_IMPL(visdet_ops, CUDA, m) {
  m.impl("roi_align", &roi_align_forward_cuda_kernel);
  m.impl("_roi_align_backward", &roi_align_backward_cuda_kernel);
}

}  // namespace visdet_ops
