// masked_conv2d: CUDA host layer (torch-facing, through the host adapter).
// Device code: masked_conv_cuda.cu. Like mmcv, finding the active positions
// (nonzero) synchronises with the host.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <optional>
#include <tuple>

#include "common/host.h"
#include "common/host_cuda.h"
#include "masked_conv.h"

namespace visdet_ops {
namespace {

using host::Tensor;

constexpr const char* kOp = "masked_conv2d";

// The column type of a storage type: float for the 16-bit types (the GEMMs
// run in float32), else the type itself.
template <typename T>
struct Column {
  using type = T;
};
template <>
struct Column<__half> {
  using type = float;
};
template <>
struct Column<__nv_bfloat16> {
  using type = float;
};

void im2col_cuda(const Tensor& input, const Tensor& idx,
                 const MaskedConvGeometry& g, const Tensor& cols) {
  host::dispatch_floating_types<__half, __nv_bfloat16>(
      host::dtype_of(input), "masked_im2col_cuda", [&](auto tag) {
        using T = typename decltype(tag)::type;
        using C = typename Column<T>::type;
        VISDET_CUDA_CHECK((masked_im2col_cuda_launch<T, C>(
            host::const_data<T>(input), host::const_data<int64_t>(idx),
            idx.size(0), g, host::mutable_data<C>(cols),
            host::current_cuda_stream(input))));
      });
}

void col2im_cuda(const Tensor& rows, const Tensor& idx, const Tensor& output) {
  host::dispatch_floating_types<__half, __nv_bfloat16>(
      host::dtype_of(output), "masked_col2im_cuda", [&](auto tag) {
        using T = typename decltype(tag)::type;
        using C = typename Column<T>::type;
        VISDET_CUDA_CHECK((masked_col2im_cuda_launch<T, C>(
            host::const_data<C>(rows), host::const_data<int64_t>(idx),
            idx.size(0), output.size(1), output.size(2), output.size(3),
            host::mutable_data<T>(output), host::current_cuda_stream(output))));
      });
}

void grad_input_cuda(const Tensor& grad_cols, const Tensor& pos_map,
                     const MaskedConvGeometry& g, const Tensor& grad_input) {
  host::dispatch_floating_types<__half, __nv_bfloat16>(
      host::dtype_of(grad_input), "masked_conv_grad_input_cuda", [&](auto tag) {
        using T = typename decltype(tag)::type;
        using C = typename Column<T>::type;
        VISDET_CUDA_CHECK((masked_conv_grad_input_cuda_launch<T, C>(
            host::const_data<C>(grad_cols), host::const_data<int64_t>(pos_map),
            grad_input.size(0), g, host::mutable_data<T>(grad_input),
            host::current_cuda_stream(grad_input))));
      });
}

struct Cuda {
  static constexpr MaskedConvDevice kernels{
      /*reduced_float_kernels=*/true, &im2col_cuda, &col2im_cuda,
      &grad_input_cuda};
  // The dispatcher runs this when any argument is on a GPU: features must be.
  static void check_device(const Tensor& features) {
    VISDET_CHECK(host::is_cuda(features), kOp,
                 ": features must be a CUDA tensor, got ",
                 host::device_of(features));
  }
  using Guard = host::CudaDeviceGuard;
};

}  // namespace

VISDET_IMPL_WITH_BACKWARD(CUDA, masked_conv2d, masked_conv2d_kernel<Cuda>,
                          masked_conv2d_backward_kernel<Cuda>)

}  // namespace visdet_ops
