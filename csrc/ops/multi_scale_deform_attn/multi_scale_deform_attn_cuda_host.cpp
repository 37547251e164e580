// multi_scale_deformable_attn: CUDA host layer (torch-facing, through the host
// adapter). Device code: multi_scale_deform_attn_cuda.cu. The backward's
// atomicAdd makes the summation order of grad_value, and so its last bits,
// vary from run to run: the determinism alert is raised in
// visdet_ops/ops/multi_scale_deform_attn.py.
#include <tuple>

#include "common/host.h"
#include "common/host_cuda.h"
#include "multi_scale_deform_attn.h"

namespace visdet_ops {
namespace {

using host::ScalarType;
using host::Tensor;

constexpr const char* kOp = "multi_scale_deformable_attn";

MSDADtype msda_dtype(ScalarType t) {
  switch (t) {
    case ScalarType::Float:
      return MSDADtype::kFloat;
    case ScalarType::Double:
      return MSDADtype::kDouble;
    case ScalarType::Half:
      return MSDADtype::kHalf;
    case ScalarType::BFloat16:
      return MSDADtype::kBFloat16;
    default:
      VISDET_CHECK(false, kOp,
                   ": CUDA supports float16, bfloat16, float32 and float64 "
                   "value, got ",
                   t);
  }
  return MSDADtype::kFloat;  // not reached
}

void check_cuda(const Tensor& value) {
  VISDET_CHECK(host::is_cuda(value), kOp,
               ": the CUDA kernel needs value on a CUDA device, got ",
               host::device_of(value));
}

Tensor msda_forward_cuda_kernel(const Tensor& value,
                                const Tensor& spatial_shapes,
                                const Tensor& level_start_index,
                                const Tensor& sampling_locations,
                                const Tensor& attention_weights,
                                int64_t im2col_step) {
  check_cuda(value);
  const host::CudaDeviceGuard device_guard(value);
  const MSDAForward f =
      msda_prepare_forward(value, spatial_shapes, level_start_index,
                           sampling_locations, attention_weights, im2col_step);
  if (f.output.numel() == 0) return f.output;
  VISDET_CUDA_CHECK(msda_forward_cuda_launch(
      msda_dtype(host::dtype_of(value)), host::const_data<void>(f.value),
      host::const_data<int64_t>(f.spatial_shapes),
      host::const_data<int64_t>(f.level_start_index),
      host::const_data<void>(f.sampling_locations),
      host::const_data<void>(f.attention_weights), f.shape,
      host::mutable_data<void>(f.output), host::current_cuda_stream(value)));
  return f.output;
}

std::tuple<Tensor, Tensor, Tensor> msda_backward_cuda_kernel(
    const Tensor& grad_output, const Tensor& value,
    const Tensor& spatial_shapes, const Tensor& level_start_index,
    const Tensor& sampling_locations, const Tensor& attention_weights,
    int64_t im2col_step) {
  check_cuda(value);
  const host::CudaDeviceGuard device_guard(value);
  // Accumulation buffers: float32 for the 16-bit types (converted once at
  // the end), the gradients themselves for float32 and float64.
  const MSDABackward b = msda_prepare_backward(
      grad_output, value, spatial_shapes, level_start_index,
      sampling_locations, attention_weights, im2col_step);
  if (b.grad_output.numel() > 0) {
    VISDET_CUDA_CHECK(msda_backward_cuda_launch(
        msda_dtype(host::dtype_of(value)), host::const_data<void>(b.grad_output),
        host::const_data<void>(b.value),
        host::const_data<int64_t>(b.spatial_shapes),
        host::const_data<int64_t>(b.level_start_index),
        host::const_data<void>(b.sampling_locations),
        host::const_data<void>(b.attention_weights), b.shape,
        host::mutable_data<void>(b.grad_value),
        host::mutable_data<void>(b.grad_sampling_locations),
        host::mutable_data<void>(b.grad_attention_weights),
        host::current_cuda_stream(value)));
  }
  return b.grads();
}

}  // namespace

VISDET_IMPL_WITH_BACKWARD(CUDA, multi_scale_deformable_attn,
                          msda_forward_cuda_kernel, msda_backward_cuda_kernel)

}  // namespace visdet_ops
