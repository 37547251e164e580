// masked_conv2d: CPU host layer (torch-facing, through the host adapter), the
// mirror image of masked_conv_cuda_host.cpp. The driver and the registered
// functions are shared (masked_conv.h); this file supplies the CPU gathers and
// scatters. CPU loops: masked_conv_cpu.cpp (float32 and float64: a 16-bit call
// computes through float32 copies).
#include "common/host.h"
#include "masked_conv.h"

namespace visdet_ops {
namespace {

using host::Tensor;

void im2col_cpu(const Tensor& input, const Tensor& idx,
                const MaskedConvGeometry& g, const Tensor& cols) {
  host::dispatch_float_double(
      host::dtype_of(input), "masked_im2col_cpu", [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* in = host::const_data<T>(input);
        const int64_t* ix = host::const_data<int64_t>(idx);
        T* out = host::mutable_data<T>(cols);
        host::parallel_for(0, cols.numel(), 4096, [&](int64_t b, int64_t e) {
          masked_im2col_cpu<T>(in, ix, g, b, e, out);
        });
      });
}

void col2im_cpu(const Tensor& rows, const Tensor& idx, const Tensor& output) {
  host::dispatch_float_double(
      host::dtype_of(output), "masked_col2im_cpu", [&](auto tag) {
        using T = typename decltype(tag)::type;
        masked_col2im_cpu<T>(host::const_data<T>(rows),
                             host::const_data<int64_t>(idx), idx.size(0),
                             output.size(1), output.size(2), output.size(3),
                             host::mutable_data<T>(output));
      });
}

void grad_input_cpu(const Tensor& grad_cols, const Tensor& pos_map,
                    const MaskedConvGeometry& g, const Tensor& grad_input) {
  host::dispatch_float_double(
      host::dtype_of(grad_input), "masked_conv_grad_input_cpu", [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* gc = host::const_data<T>(grad_cols);
        const int64_t* pm = host::const_data<int64_t>(pos_map);
        T* gi = host::mutable_data<T>(grad_input);
        host::parallel_for(0, grad_input.numel(), 4096,
                           [&](int64_t b, int64_t e) {
                             masked_conv_grad_input_cpu<T>(gc, pm, g, b, e, gi);
                           });
      });
}

struct Cpu {
  static constexpr MaskedConvDevice kernels{
      /*reduced_float_kernels=*/false, &im2col_cpu, &col2im_cpu,
      &grad_input_cpu};
  // Any argument off the CPU makes the dispatcher pick another device.
  static void check_device(const Tensor&) {}
  using Guard = host::CpuDeviceGuard;
};

}  // namespace

VISDET_IMPL_WITH_BACKWARD(CPU, masked_conv2d, masked_conv2d_kernel<Cpu>,
                          masked_conv2d_backward_kernel<Cpu>)

}  // namespace visdet_ops
