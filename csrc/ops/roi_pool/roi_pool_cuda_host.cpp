// roi_pool: CUDA host layer (torch-facing). Device code: roi_pool_cuda.cu.
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "common/cuda_types.h"
#include "roi_pool.h"

namespace visdet_ops {
namespace {

std::tuple<at::Tensor, at::Tensor> roi_pool_forward_cuda_kernel(
    const at::Tensor& input, const at::Tensor& rois, int64_t pooled_height,
    int64_t pooled_width, double spatial_scale) {
  const c10::cuda::CUDAGuard device_guard(input.device());
  const RoIPoolForward f = roi_pool_prepare_forward(
      input, rois, pooled_height, pooled_width, spatial_scale);
  if (f.shape.output_numel() == 0) return f.outputs();
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, input.scalar_type(), "roi_pool_forward_cuda",
      [&] {
        using T = cuda_t<scalar_t>;
        C10_CUDA_CHECK(roi_pool_forward_cuda_launch<T>(
            cuda_data<scalar_t>(f.input), f.rois.const_data_ptr<acc_t<T>>(),
            f.shape, spatial_scale, cuda_mutable_data<scalar_t>(f.output),
            f.argmax.mutable_data_ptr<int32_t>(), stream));
      });
  return f.outputs();
}

at::Tensor roi_pool_backward_cuda_kernel(const at::Tensor& grad_output,
                                         const at::Tensor& rois,
                                         const at::Tensor& argmax,
                                         int64_t batch_size, int64_t channels,
                                         int64_t height, int64_t width) {
  const c10::cuda::CUDAGuard device_guard(grad_output.device());
  const RoIPoolBackward b = roi_pool_prepare_backward(
      grad_output, rois, argmax, batch_size, channels, height, width);
  // atomicAdd makes the summation order, and so the last bits, vary where
  // bins of overlapping RoIs share their maximum.
  at::globalContext().alertNotDeterministic("visdet_ops::roi_pool backward (CUDA)");
  if (b.shape.output_numel() == 0) return b.grad_input();
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, grad_output.scalar_type(),
      "roi_pool_backward_cuda", [&] {
        using T = cuda_t<scalar_t>;
        C10_CUDA_CHECK(roi_pool_backward_cuda_launch<T>(
            cuda_data<scalar_t>(b.grad_output), b.rois.const_data_ptr<acc_t<T>>(),
            b.argmax.const_data_ptr<int32_t>(), b.shape,
            b.grad_accum.mutable_data_ptr<acc_t<T>>(), stream));
      });
  return b.grad_input();
}

}  // namespace

TORCH_LIBRARY_IMPL(visdet_ops, CUDA, m) {
  m.impl("roi_pool", &roi_pool_forward_cuda_kernel);
  m.impl("_roi_pool_backward", &roi_pool_backward_cuda_kernel);
}

}  // namespace visdet_ops
