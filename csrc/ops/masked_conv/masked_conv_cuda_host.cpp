// masked_conv2d: CUDA host layer (torch-facing). Device code:
// masked_conv_cuda.cu. Like mmcv, finding the active positions (nonzero)
// synchronises with the host.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "masked_conv.h"

namespace visdet_ops {
namespace {

constexpr const char* kOp = "masked_conv2d";

// torch's 16-bit types have the layout of CUDA's; their columns are float.
template <typename S>
struct CudaType {
  using type = S;
  using col = S;
};
template <>
struct CudaType<c10::Half> {
  using type = __half;
  using col = float;
};
template <>
struct CudaType<c10::BFloat16> {
  using type = __nv_bfloat16;
  using col = float;
};

#define VISDET_DISPATCH(TYPE, NAME, ...) \
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, TYPE, NAME, __VA_ARGS__)

void im2col_cuda(const at::Tensor& input, const at::Tensor& idx,
                 const MaskedConvGeometry& g, at::Tensor& cols) {
  VISDET_DISPATCH(input.scalar_type(), "masked_im2col_cuda", [&] {
    using T = typename CudaType<scalar_t>::type;
    using C = typename CudaType<scalar_t>::col;
    const cudaError_t err = masked_im2col_cuda_launch<T, C>(
        reinterpret_cast<const T*>(input.const_data_ptr<scalar_t>()),
        idx.const_data_ptr<int64_t>(), idx.size(0), g,
        reinterpret_cast<C*>(cols.mutable_data_ptr()),
        c10::cuda::getCurrentCUDAStream());
    C10_CUDA_CHECK(err);
  });
}

void col2im_cuda(const at::Tensor& rows, const at::Tensor& idx, at::Tensor& output) {
  VISDET_DISPATCH(output.scalar_type(), "masked_col2im_cuda", [&] {
    using T = typename CudaType<scalar_t>::type;
    using C = typename CudaType<scalar_t>::col;
    const cudaError_t err = masked_col2im_cuda_launch<T, C>(
        reinterpret_cast<const C*>(rows.const_data_ptr()),
        idx.const_data_ptr<int64_t>(), idx.size(0), output.size(1),
        output.size(2), output.size(3),
        reinterpret_cast<T*>(output.mutable_data_ptr<scalar_t>()),
        c10::cuda::getCurrentCUDAStream());
    C10_CUDA_CHECK(err);
  });
}

void grad_input_cuda(const at::Tensor& grad_cols, const at::Tensor& pos_map,
                     const MaskedConvGeometry& g, at::Tensor& grad_input) {
  VISDET_DISPATCH(grad_input.scalar_type(), "masked_conv_grad_input_cuda", [&] {
    using T = typename CudaType<scalar_t>::type;
    using C = typename CudaType<scalar_t>::col;
    const cudaError_t err = masked_conv_grad_input_cuda_launch<T, C>(
        reinterpret_cast<const C*>(grad_cols.const_data_ptr()),
        pos_map.const_data_ptr<int64_t>(), grad_input.size(0), g,
        reinterpret_cast<T*>(grad_input.mutable_data_ptr<scalar_t>()),
        c10::cuda::getCurrentCUDAStream());
    C10_CUDA_CHECK(err);
  });
}

#undef VISDET_DISPATCH

constexpr MaskedConvDevice kCuda{&im2col_cuda, &col2im_cuda, &grad_input_cuda};

at::Tensor masked_conv2d_cuda_kernel(const at::Tensor& features, const at::Tensor& mask,
                                     const at::Tensor& weight,
                                     const std::optional<at::Tensor>& bias,
                                     int64_t pad_h, int64_t pad_w) {
  TORCH_CHECK(features.is_cuda(), kOp, ": features must be a CUDA tensor, got ",
              features.device());
  const c10::cuda::CUDAGuard device_guard(features.device());
  return masked_conv2d_forward_impl(features, mask, weight, bias, pad_h, pad_w, kCuda);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> masked_conv2d_backward_cuda_kernel(
    const at::Tensor& grad_output, const at::Tensor& features, const at::Tensor& mask,
    const at::Tensor& weight, int64_t pad_h, int64_t pad_w) {
  TORCH_CHECK(features.is_cuda(), kOp, ": features must be a CUDA tensor, got ",
              features.device());
  const c10::cuda::CUDAGuard device_guard(features.device());
  return masked_conv2d_backward_impl(grad_output, features, mask, weight, pad_h, pad_w,
                                     kCuda);
}

}  // namespace

TORCH_LIBRARY_IMPL(visdet_ops, CUDA, m) {
  m.impl("masked_conv2d", &masked_conv2d_cuda_kernel);
  m.impl("_masked_conv2d_backward", &masked_conv2d_backward_cuda_kernel);
}

}  // namespace visdet_ops
