// deform_roi_pool: CUDA host layer (torch-facing, through the host adapter).
// Device code: deform_roi_pool_cuda.cu. The input gradient is accumulated with
// atomicAdd: the determinism alert is raised in
// visdet_ops/ops/deform_roi_pool.py.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <optional>
#include <tuple>

#include "common/host.h"
#include "common/host_cuda.h"
#include "common/scalar.h"
#include "deform_roi_pool.h"

namespace visdet_ops {
namespace {

using host::Tensor;

Tensor deform_roi_pool_forward_cuda_kernel(
    const Tensor& input, const Tensor& rois,
    const std::optional<Tensor>& offset, int64_t pooled_height,
    int64_t pooled_width, double spatial_scale, int64_t sampling_ratio,
    double gamma) {
  const host::CudaDeviceGuard device_guard(input);
  const DeformRoIPoolForward f = deform_roi_pool_prepare_forward(
      input, rois, offset, pooled_height, pooled_width, spatial_scale,
      sampling_ratio, gamma);
  if (f.shape.output_numel() == 0) return f.output;
  const cudaStream_t stream = host::current_cuda_stream(input);
  host::dispatch_floating_types<__half, __nv_bfloat16>(
      host::dtype_of(input), "deform_roi_pool_forward_cuda", [&](auto tag) {
        using S = typename decltype(tag)::type;
        using T = acc_t<S>;
        // (The launch's result is named: its template arguments' comma would
        // split a macro argument.)
        const cudaError_t status = deform_roi_pool_forward_cuda_launch<S, T>(
            host::const_data<S>(f.input), host::const_data<T>(f.rois),
            f.has_offset ? host::const_data<S>(f.offset) : nullptr, f.shape,
            static_cast<T>(spatial_scale), static_cast<T>(gamma),
            host::mutable_data<S>(f.output), stream);
        VISDET_CUDA_CHECK(status);
      });
  return f.output;
}

std::tuple<Tensor, Tensor> deform_roi_pool_backward_cuda_kernel(
    const Tensor& grad_output, const Tensor& input, const Tensor& rois,
    const std::optional<Tensor>& offset, double spatial_scale,
    int64_t sampling_ratio, double gamma) {
  const host::CudaDeviceGuard device_guard(input);
  const DeformRoIPoolBackward b = deform_roi_pool_prepare_backward(
      grad_output, input, rois, offset, spatial_scale, sampling_ratio, gamma);
  if (b.shape.output_numel() == 0) return b.outputs();
  const cudaStream_t stream = host::current_cuda_stream(input);
  host::dispatch_floating_types<__half, __nv_bfloat16>(
      host::dtype_of(input), "deform_roi_pool_backward_cuda", [&](auto tag) {
        using S = typename decltype(tag)::type;
        using T = acc_t<S>;
        const cudaError_t status = deform_roi_pool_backward_cuda_launch<S, T>(
            host::const_data<S>(b.grad_output), host::const_data<S>(b.input),
            host::const_data<T>(b.rois),
            b.has_offset ? host::const_data<S>(b.offset) : nullptr, b.shape,
            static_cast<T>(spatial_scale), static_cast<T>(gamma),
            host::mutable_data<T>(b.grad_input),
            b.has_offset ? host::mutable_data<S>(b.grad_offset) : nullptr,
            stream);
        VISDET_CUDA_CHECK(status);
      });
  return b.outputs();
}

}  // namespace

VISDET_IMPL_WITH_BACKWARD(CUDA, deform_roi_pool,
                          deform_roi_pool_forward_cuda_kernel,
                          deform_roi_pool_backward_cuda_kernel)

}  // namespace visdet_ops
