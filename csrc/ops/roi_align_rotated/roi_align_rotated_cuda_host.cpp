// roi_align_rotated: CUDA host layer (torch-facing, through the host
// adapter). Device code: roi_align_rotated_cuda.cu. The backward's atomicAdd
// makes the summation order, and so the last bits, vary: the determinism
// alert is raised in visdet_ops/ops/roi_align_rotated.py.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/host.h"
#include "common/host_cuda.h"
#include "roi_align_rotated.h"

namespace visdet_ops {
namespace {

using host::Tensor;

Tensor roi_align_rotated_forward_cuda_kernel(
    const Tensor& input, const Tensor& rois, int64_t pooled_height,
    int64_t pooled_width, double spatial_scale, int64_t sampling_ratio,
    bool aligned, bool clockwise) {
  const host::CudaDeviceGuard device_guard(input);
  const RoIAlignRotatedForward f = roi_align_rotated_prepare_forward(
      input, rois, pooled_height, pooled_width, spatial_scale, sampling_ratio,
      aligned, clockwise);
  if (f.shape.output_numel() == 0) return f.output;
  const cudaStream_t stream = host::current_cuda_stream(input);
  host::dispatch_floating_types<__half, __nv_bfloat16>(
      host::dtype_of(input), "roi_align_rotated_forward_cuda", [&](auto tag) {
        using T = typename decltype(tag)::type;
        using A = acc_t<T>;
        VISDET_CUDA_CHECK(roi_align_rotated_forward_cuda_launch<T>(
            host::const_data<T>(f.input), host::const_data<A>(f.rois),
            f.shape, spatial_scale, host::mutable_data<T>(f.output), stream));
      });
  return f.output;
}

Tensor roi_align_rotated_backward_cuda_kernel(
    const Tensor& grad_output, const Tensor& rois, int64_t batch_size,
    int64_t channels, int64_t height, int64_t width, double spatial_scale,
    int64_t sampling_ratio, bool aligned, bool clockwise) {
  const host::CudaDeviceGuard device_guard(grad_output);
  const RoIAlignRotatedBackward b = roi_align_rotated_prepare_backward(
      grad_output, rois, batch_size, channels, height, width, spatial_scale,
      sampling_ratio, aligned, clockwise, RoIGradLayout::kStridedUninitialised);
  // No early return for K == 0: the launcher zeroes grad_accum then.
  const cudaStream_t stream = host::current_cuda_stream(grad_output);
  host::dispatch_floating_types<__half, __nv_bfloat16>(
      host::dtype_of(grad_output), "roi_align_rotated_backward_cuda",
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        using A = acc_t<T>;
        VISDET_CUDA_CHECK(roi_align_rotated_backward_cuda_launch<T>(
            host::const_data<T>(b.grad_output), b.grad_strides(),
            host::const_data<A>(b.rois), b.shape, spatial_scale,
            host::mutable_data<A>(b.grad_accum), stream));
      });
  return b.grad_input();
}

}  // namespace

VISDET_IMPL_WITH_BACKWARD(CUDA, roi_align_rotated,
                          roi_align_rotated_forward_cuda_kernel,
                          roi_align_rotated_backward_cuda_kernel)

}  // namespace visdet_ops
