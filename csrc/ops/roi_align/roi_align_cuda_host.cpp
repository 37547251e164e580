// roi_align: CUDA host layer (torch-facing). Device code: roi_align_cuda.cu.
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "roi_align.h"
#include "roi_align_kernel.h"

namespace visdet_ops {
namespace {

std::tuple<at::Tensor, at::Tensor, at::Tensor> roi_align_forward_cuda_kernel(
    const at::Tensor& input, const at::Tensor& rois, int64_t pooled_height,
    int64_t pooled_width, double spatial_scale, int64_t sampling_ratio,
    c10::string_view pool_mode, bool aligned) {
  const c10::cuda::CUDAGuard device_guard(input.device());
  const RoIAlignShape s =
      roi_align_check_forward(input, rois, pooled_height, pooled_width,
                              spatial_scale, sampling_ratio, pool_mode,
                              aligned);
  const at::Tensor input_c = input.contiguous();
  const at::Tensor rois_c = rois.contiguous();
  at::Tensor output, argmax_y, argmax_x;
  std::tie(output, argmax_y, argmax_x) = roi_align_empty_outputs(input, s);
  const bool is_max = s.pool_mode == roi_align_detail::kMax;
  if (s.output_numel() == 0) return {output, argmax_y, argmax_x};
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "roi_align_forward_cuda", [&] {
    C10_CUDA_CHECK(roi_align_forward_cuda_launch<scalar_t>(
        input_c.data_ptr<scalar_t>(), rois_c.data_ptr<scalar_t>(), s,
        static_cast<scalar_t>(spatial_scale), output.data_ptr<scalar_t>(),
        is_max ? argmax_y.data_ptr<scalar_t>() : nullptr,
        is_max ? argmax_x.data_ptr<scalar_t>() : nullptr, stream));
  });
  return {output, argmax_y, argmax_x};
}

at::Tensor roi_align_backward_cuda_kernel(
    const at::Tensor& grad_output, const at::Tensor& rois,
    const at::Tensor& argmax_y, const at::Tensor& argmax_x,
    int64_t batch_size, int64_t channels, int64_t height, int64_t width,
    double spatial_scale, int64_t sampling_ratio, c10::string_view pool_mode,
    bool aligned) {
  const c10::cuda::CUDAGuard device_guard(grad_output.device());
  const RoIAlignShape s = roi_align_check_backward(
      grad_output, rois, argmax_y, argmax_x, batch_size, channels, height,
      width, spatial_scale, sampling_ratio, pool_mode, aligned);
  // atomicAdd makes the summation order, and so the last bits, vary.
  at::globalContext().alertNotDeterministic("visdet_ops::roi_align backward (CUDA)");
  at::Tensor grad_input =
      at::zeros({batch_size, channels, height, width}, grad_output.options());
  if (s.output_numel() == 0) return grad_input;
  const at::Tensor grad_c = grad_output.contiguous();
  const at::Tensor rois_c = rois.contiguous();
  const bool is_max = s.pool_mode == roi_align_detail::kMax;
  const at::Tensor ay_c = argmax_y.contiguous();
  const at::Tensor ax_c = argmax_x.contiguous();
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES(grad_output.scalar_type(), "roi_align_backward_cuda", [&] {
    C10_CUDA_CHECK(roi_align_backward_cuda_launch<scalar_t>(
        grad_c.data_ptr<scalar_t>(), rois_c.data_ptr<scalar_t>(),
        is_max ? ay_c.data_ptr<scalar_t>() : nullptr,
        is_max ? ax_c.data_ptr<scalar_t>() : nullptr, s,
        static_cast<scalar_t>(spatial_scale), grad_input.data_ptr<scalar_t>(),
        stream));
  });
  return grad_input;
}

}  // namespace

TORCH_LIBRARY_IMPL(visdet_ops, CUDA, m) {
  m.impl("roi_align", &roi_align_forward_cuda_kernel);
  m.impl("_roi_align_backward", &roi_align_backward_cuda_kernel);
}

}  // namespace visdet_ops
