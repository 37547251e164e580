// deform_conv: CPU host layer (torch-facing, through the host adapter), the
// mirror image of deform_conv_cuda_host.cpp. The GEMM driver and the
// registered functions are shared (deform_conv.h); this file supplies the CPU
// im2col / col2im. CPU loops: deform_conv_cpu.cpp (float32 and float64: a
// 16-bit call computes through float32 copies). col2im gives each image to
// one thread: deterministic.
#include <algorithm>
#include <optional>

#include "common/host.h"
#include "deform_conv.h"

namespace visdet_ops {
namespace {

using host::Tensor;

void im2col_cpu(const Tensor& input, const Tensor& offset,
                const std::optional<Tensor>& mask, const DeformConvShape& s,
                const Tensor& columns) {
  host::dispatch_float_double(
      host::dtype_of(input), "deform_conv_im2col_cpu", [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* in = host::const_data<T>(input);
        const T* off = host::const_data<T>(offset);
        const T* m = mask.has_value() ? host::const_data<T>(*mask) : nullptr;
        T* cols = host::mutable_data<T>(columns);
        const int64_t grain = std::max<int64_t>(
            1, 4096 / std::max<int64_t>(1, s.channels_per_group()));
        host::parallel_for(0, s.samples(), grain,
                           [&](int64_t begin, int64_t end) {
                             deform_conv_im2col_cpu<T>(in, off, m, s, begin,
                                                       end, cols);
                           });
      });
}

int64_t channel_slices_cpu(const DeformConvShape&) { return 1; }

void col2im_cpu(const Tensor& input, const Tensor& offset,
                const std::optional<Tensor>& mask, const Tensor& columns,
                const DeformConvShape& s, int64_t /*slices*/,
                const Tensor& grad_input, const Tensor& grad_offset,
                const std::optional<Tensor>& grad_mask) {
  host::dispatch_float_double(
      host::dtype_of(input), "deform_conv_col2im_cpu", [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* in = host::const_data<T>(input);
        const T* off = host::const_data<T>(offset);
        const T* m = mask.has_value() ? host::const_data<T>(*mask) : nullptr;
        T* gc = host::mutable_data<T>(columns);
        T* gi = host::mutable_data<T>(grad_input);
        T* go = host::mutable_data<T>(grad_offset);
        T* gm = mask.has_value() ? host::mutable_data<T>(*grad_mask) : nullptr;
        host::parallel_for(0, s.batch, 1, [&](int64_t begin, int64_t end) {
          for (int64_t image = begin; image < end; ++image) {
            deform_conv_col2im_cpu<T>(in, off, m, gc, s, image, gi, go, gm);
          }
        });
      });
}

struct Cpu {
  static constexpr DeformConvKernels kernels{
      /*reduced_float_kernels=*/false, &im2col_cpu, &channel_slices_cpu,
      &col2im_cpu, /*col2im_overwrites=*/nullptr, /*add_bias=*/nullptr,
      /*sum_slices=*/nullptr};
  using Guard = host::CpuDeviceGuard;
};

}  // namespace

VISDET_IMPL_WITH_BACKWARD(CPU, deform_conv2d, deform_conv2d_forward_kernel<Cpu>,
                          deform_conv2d_backward_kernel<Cpu>)

}  // namespace visdet_ops
