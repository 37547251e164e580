// deform_conv: CUDA host layer (torch-facing, through the host adapter). The
// GEMM driver and the registered functions are shared with the CPU
// (deform_conv.h); this file supplies the CUDA im2col / col2im. Device code:
// deform_conv_cuda.cu. The backward accumulates grad_input with atomicAdd: the
// determinism alert is raised in visdet_ops/ops/deform_conv.py.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <optional>
#include <tuple>

#include "common/host.h"
#include "common/host_cuda.h"
#include "common/scalar.h"
#include "deform_conv.h"

namespace visdet_ops {
namespace {

using host::Tensor;

template <typename T>
const T* data_or_null(const std::optional<Tensor>& t) {
  return t.has_value() ? host::const_data<T>(*t) : nullptr;
}

void im2col_cuda(const Tensor& input, const Tensor& offset,
                 const std::optional<Tensor>& mask, const DeformConvShape& s,
                 const Tensor& columns) {
  const cudaStream_t stream = host::current_cuda_stream(input);
  host::dispatch_floating_types<__half, __nv_bfloat16>(
      host::dtype_of(input), "deform_conv_im2col_cuda", [&](auto tag) {
        using T = typename decltype(tag)::type;
        VISDET_CUDA_CHECK(deform_conv_im2col_cuda_launch<T>(
            host::const_data<T>(input), host::const_data<T>(offset),
            data_or_null<T>(mask), s, host::mutable_data<T>(columns), stream));
      });
}

int64_t channel_slices_cuda(const DeformConvShape& s) {
  return deform_conv_cuda_channel_slices(s);
}

void col2im_cuda(const Tensor& input, const Tensor& offset,
                 const std::optional<Tensor>& mask, const Tensor& columns,
                 const DeformConvShape& s, int64_t slices,
                 const Tensor& grad_input, const Tensor& grad_offset,
                 const std::optional<Tensor>& grad_mask) {
  const cudaStream_t stream = host::current_cuda_stream(input);
  host::dispatch_floating_types<__half, __nv_bfloat16>(
      host::dtype_of(input), "deform_conv_col2im_cuda", [&](auto tag) {
        using T = typename decltype(tag)::type;
        using A = acc_t<T>;
        VISDET_CUDA_CHECK((deform_conv_col2im_cuda_launch<T, A>(
            host::const_data<T>(input), host::const_data<T>(offset),
            data_or_null<T>(mask), host::mutable_data<T>(columns), s, slices,
            host::mutable_data<A>(grad_input),
            host::mutable_data<A>(grad_offset),
            mask.has_value() ? host::mutable_data<A>(*grad_mask) : nullptr,
            stream)));
      });
}

struct Cuda {
  static constexpr DeformConvKernels kernels{
      /*reduced_float_kernels=*/true, &im2col_cuda, &channel_slices_cuda,
      &col2im_cuda};
  using Guard = host::CudaDeviceGuard;
};

}  // namespace

VISDET_LIBRARY_IMPL(CUDA, m) {
  m.impl("deform_conv2d", VISDET_KERNEL(deform_conv2d_forward_kernel<Cuda>));
  m.impl("_deform_conv2d_backward",
         VISDET_KERNEL(deform_conv2d_backward_kernel<Cuda>));
}

}  // namespace visdet_ops
