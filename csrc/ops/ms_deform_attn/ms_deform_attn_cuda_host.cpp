// multi_scale_deformable_attn: CUDA host layer (torch-facing). Device code:
// ms_deform_attn_cuda.cu.
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "ms_deform_attn.h"

namespace visdet_ops {
namespace {

constexpr const char* kOp = "multi_scale_deformable_attn";

MSDADtype msda_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return MSDADtype::kFloat;
    case at::kDouble:
      return MSDADtype::kDouble;
    case at::kHalf:
      return MSDADtype::kHalf;
    case at::kBFloat16:
      return MSDADtype::kBFloat16;
    default:
      TORCH_CHECK(false, kOp, ": CUDA supports float16, bfloat16, float32 "
                  "and float64 value, got ", t);
  }
}

void check_cuda(const at::Tensor& value) {
  TORCH_CHECK(value.is_cuda(), kOp,
              ": the CUDA kernel needs value on a CUDA device, got ",
              value.device());
}

at::Tensor msda_forward_cuda_kernel(const at::Tensor& value,
                                    const at::Tensor& spatial_shapes,
                                    const at::Tensor& level_start_index,
                                    const at::Tensor& sampling_locations,
                                    const at::Tensor& attention_weights,
                                    int64_t im2col_step) {
  check_cuda(value);
  const c10::cuda::CUDAGuard device_guard(value.device());
  const MSDAInputs in =
      msda_prepare(value, spatial_shapes, level_start_index,
                   sampling_locations, attention_weights, im2col_step);
  const MSDAShape& s = in.shape;
  at::Tensor output = at::empty(
      {s.batch, s.num_queries, s.num_heads * s.head_dim}, value.options());
  if (output.numel() == 0) return output;
  C10_CUDA_CHECK(msda_forward_cuda_launch(
      msda_dtype(value.scalar_type()), in.value.data_ptr(),
      in.spatial_shapes.data_ptr<int64_t>(),
      in.level_start_index.data_ptr<int64_t>(),
      in.sampling_locations.data_ptr(), in.attention_weights.data_ptr(), s,
      output.data_ptr(), c10::cuda::getCurrentCUDAStream()));
  return output;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> msda_backward_cuda_kernel(
    const at::Tensor& grad_output, const at::Tensor& value,
    const at::Tensor& spatial_shapes, const at::Tensor& level_start_index,
    const at::Tensor& sampling_locations, const at::Tensor& attention_weights,
    int64_t im2col_step) {
  check_cuda(value);
  const c10::cuda::CUDAGuard device_guard(value.device());
  at::Tensor go;
  const MSDAInputs in = msda_prepare_backward(
      grad_output, value, spatial_shapes, level_start_index,
      sampling_locations, attention_weights, im2col_step, &go);
  const MSDAShape& s = in.shape;
  // grad_value accumulates with atomicAdd: the summation order, and so the
  // last bits, vary from run to run.
  at::globalContext().alertNotDeterministic(
      "multi_scale_deformable_attn_backward_cuda");
  // Accumulation buffers: float32 for the 16-bit types (converted once at
  // the end), the gradients themselves for float32 and float64.
  const at::ScalarType acc =
      value.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const auto acc_options = value.options().dtype(acc);
  at::Tensor grad_value = at::zeros(in.value.sizes(), acc_options);
  at::Tensor grad_loc = at::zeros(in.sampling_locations.sizes(), acc_options);
  at::Tensor grad_attn = at::zeros(in.attention_weights.sizes(), acc_options);
  if (go.numel() > 0) {
    C10_CUDA_CHECK(msda_backward_cuda_launch(
        msda_dtype(value.scalar_type()), go.data_ptr(), in.value.data_ptr(),
        in.spatial_shapes.data_ptr<int64_t>(),
        in.level_start_index.data_ptr<int64_t>(),
        in.sampling_locations.data_ptr(), in.attention_weights.data_ptr(), s,
        grad_value.data_ptr(), grad_loc.data_ptr(), grad_attn.data_ptr(),
        c10::cuda::getCurrentCUDAStream()));
  }
  // Each gradient in its argument's dtype: float32 sampling locations and
  // attention weights beside 16-bit value keep float32 gradients.
  return {grad_value.to(value.scalar_type()),
          grad_loc.to(sampling_locations.scalar_type()),
          grad_attn.to(attention_weights.scalar_type())};
}

}  // namespace

TORCH_LIBRARY_IMPL(visdet_ops, CUDA, m) {
  m.impl("multi_scale_deformable_attn", &msda_forward_cuda_kernel);
  m.impl("_multi_scale_deformable_attn_backward", &msda_backward_cuda_kernel);
}

}  // namespace visdet_ops
