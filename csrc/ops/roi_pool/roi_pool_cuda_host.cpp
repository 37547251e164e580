// roi_pool: CUDA host layer (torch-facing, through the host adapter). Device
// code: roi_pool_cuda.cu. The backward's atomicAdd makes the summation order,
// and so the last bits, vary where bins of overlapping RoIs share their
// maximum: the determinism alert is raised in visdet_ops/ops/roi_pool.py.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <tuple>

#include "common/host.h"
#include "common/host_cuda.h"
#include "roi_pool.h"

namespace visdet_ops {
namespace {

using host::Tensor;

std::tuple<Tensor, Tensor> roi_pool_forward_cuda_kernel(
    const Tensor& input, const Tensor& rois, int64_t pooled_height,
    int64_t pooled_width, double spatial_scale) {
  const host::CudaDeviceGuard device_guard(input);
  const RoIPoolForward f = roi_pool_prepare_forward(
      input, rois, pooled_height, pooled_width, spatial_scale);
  if (f.shape.output_numel() == 0) return f.outputs();
  const cudaStream_t stream = host::current_cuda_stream(input);
  host::dispatch_floating_types<__half, __nv_bfloat16>(
      host::dtype_of(input), "roi_pool_forward_cuda", [&](auto tag) {
        using T = typename decltype(tag)::type;
        VISDET_CUDA_CHECK(roi_pool_forward_cuda_launch<T>(
            host::const_data<T>(f.input), host::const_data<acc_t<T>>(f.rois),
            f.shape, spatial_scale, host::mutable_data<T>(f.output),
            host::mutable_data<int32_t>(f.argmax), stream));
      });
  return f.outputs();
}

Tensor roi_pool_backward_cuda_kernel(const Tensor& grad_output,
                                     const Tensor& rois, const Tensor& argmax,
                                     int64_t batch_size, int64_t channels,
                                     int64_t height, int64_t width) {
  const host::CudaDeviceGuard device_guard(grad_output);
  const RoIPoolBackward b = roi_pool_prepare_backward(
      grad_output, rois, argmax, batch_size, channels, height, width);
  if (b.shape.output_numel() == 0) return b.grad_input();
  const cudaStream_t stream = host::current_cuda_stream(grad_output);
  host::dispatch_floating_types<__half, __nv_bfloat16>(
      host::dtype_of(grad_output), "roi_pool_backward_cuda", [&](auto tag) {
        using T = typename decltype(tag)::type;
        VISDET_CUDA_CHECK(roi_pool_backward_cuda_launch<T>(
            host::const_data<T>(b.grad_output),
            host::const_data<acc_t<T>>(b.rois),
            host::const_data<int32_t>(b.argmax), b.shape,
            host::mutable_data<acc_t<T>>(b.grad_accum), stream));
      });
  return b.grad_input();
}

}  // namespace

VISDET_IMPL_WITH_BACKWARD(CUDA, roi_pool, roi_pool_forward_cuda_kernel,
                          roi_pool_backward_cuda_kernel)

}  // namespace visdet_ops
