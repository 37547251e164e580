// deform_conv: CUDA host layer (torch-facing, through the host adapter). The
// GEMM driver and the registered functions are shared with the CPU
// (deform_conv.h); this file supplies the CUDA im2col / col2im. Device code:
// deform_conv_cuda.cu. The backward accumulates grad_input with atomicAdd: the
// determinism alert is raised in visdet_ops/ops/deform_conv.py.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <optional>
#include <tuple>
#include <type_traits>

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

// Whether im2col and col2im of this input (in the kernels' dtype) and chunk
// shape go through channels-last copies (deform_conv_launch.h): float
// accumulation (not double) on a device and shape that take them. col2im then
// overwrites grad_input, so the backward need not zero it first
// (DeformConvKernels::col2im_overwrites).
bool channels_last_cuda(const Tensor& input, const DeformConvShape& s) {
  return host::dtype_of(input) != host::ScalarType::Double &&
         deform_conv_cuda_channels_last(s, host::device_index(input));
}

// A scratch [B, H, W, C] copy of the chunk's input, in dtype.
Tensor nhwc_scratch(const Tensor& input, const DeformConvShape& s,
                    host::ScalarType dtype) {
  return host::empty({s.batch, s.height, s.width, s.channels}, dtype, input);
}

void im2col_cuda(const Tensor& input, const Tensor& offset,
                 const std::optional<Tensor>& mask, const DeformConvShape& s,
                 const Tensor& columns) {
  const cudaStream_t stream = host::current_cuda_stream(input);
  host::dispatch_floating_types<__half, __nv_bfloat16>(
      host::dtype_of(input), "deform_conv_im2col_cuda", [&](auto tag) {
        using T = typename decltype(tag)::type;
        if constexpr (!std::is_same<T, double>::value) {
          if (channels_last_cuda(input, s)) {
            const Tensor input_nhwc =
                nhwc_scratch(input, s, host::dtype_of(input));
            VISDET_CUDA_CHECK(deform_conv_im2col_nhwc_cuda_launch<T>(
                host::const_data<T>(input), host::const_data<T>(offset),
                data_or_null<T>(mask), s, host::mutable_data<T>(input_nhwc),
                host::mutable_data<T>(columns), stream));
            return;
          }
        }
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
        if constexpr (std::is_same<A, float>::value) {
          if (channels_last_cuda(input, s)) {
            // About 2.5x fewer L2 operations in the kernel than over NCHW.
            // The chunk's images are its own, so grad_input is overwritten.
            const Tensor input_nhwc =
                nhwc_scratch(input, s, host::dtype_of(input));
            const Tensor grad_nhwc =
                nhwc_scratch(input, s, host::dtype_of(grad_input));
            VISDET_CUDA_CHECK(deform_conv_col2im_nhwc_cuda_launch<T>(
                host::const_data<T>(input), host::const_data<T>(offset),
                data_or_null<T>(mask), host::mutable_data<T>(columns), s,
                slices, host::mutable_data<T>(input_nhwc),
                host::mutable_data<float>(grad_nhwc),
                host::mutable_data<float>(grad_input),
                host::mutable_data<float>(grad_offset),
                mask.has_value() ? host::mutable_data<float>(*grad_mask)
                                 : nullptr,
                stream));
            return;
          }
        }
        VISDET_CUDA_CHECK((deform_conv_col2im_cuda_launch<T, A>(
            host::const_data<T>(input), host::const_data<T>(offset),
            data_or_null<T>(mask), host::mutable_data<T>(columns), s, slices,
            host::mutable_data<A>(grad_input),
            host::mutable_data<A>(grad_offset),
            mask.has_value() ? host::mutable_data<A>(*grad_mask) : nullptr,
            stream)));
      });
}

// The host layer's two small steps as single launches of our own kernels
// (the aten add / sum + copy they replace cost a dispatch each: the batch-1
// DCN calls are host-bound).
// out: [C_out, cols] (the GEMM's result), bias: [C_out].
void add_bias_cuda(const Tensor& out, const Tensor& bias) {
  const cudaStream_t stream = host::current_cuda_stream(out);
  host::dispatch_floating_types<__half, __nv_bfloat16>(
      host::dtype_of(out), "deform_conv_add_bias_cuda", [&](auto tag) {
        using T = typename decltype(tag)::type;
        VISDET_CUDA_CHECK(deform_conv_add_bias_cuda_launch<T>(
            host::mutable_data<T>(out), host::const_data<T>(bias),
            out.size(0), out.size(1), stream));
      });
}

void sum_slices_cuda(const Tensor& parts, const Tensor& out) {
  const cudaStream_t stream = host::current_cuda_stream(out);
  host::dispatch_floating_types<__half, __nv_bfloat16>(
      host::dtype_of(out), "deform_conv_sum_slices_cuda", [&](auto tag) {
        using T = typename decltype(tag)::type;
        using A = acc_t<T>;
        VISDET_CUDA_CHECK((deform_conv_sum_slices_cuda_launch<T, A>(
            host::const_data<A>(parts), parts.size(0), out.numel(),
            host::mutable_data<T>(out), stream)));
      });
}

struct Cuda {
  static constexpr DeformConvKernels kernels{
      /*reduced_float_kernels=*/true, &im2col_cuda, &channel_slices_cuda,
      &col2im_cuda, &channels_last_cuda, &add_bias_cuda, &sum_slices_cuda};
  using Guard = host::CudaDeviceGuard;
};

}  // namespace

VISDET_IMPL_WITH_BACKWARD(CUDA, deform_conv2d,
                          deform_conv2d_forward_kernel<Cuda>,
                          deform_conv2d_backward_kernel<Cuda>)

}  // namespace visdet_ops
