// roi_align: CPU host layer (torch-facing, through the host adapter), the
// mirror image of roi_align_cuda_host.cpp. CPU loops: roi_align_cpu.cpp. Each
// channel's gradient is summed by one thread in a fixed order: deterministic.
#include <tuple>

#include "common/host.h"
#include "common/scalar.h"
#include "roi_align.h"

namespace visdet_ops {
namespace {

using host::Tensor;

std::tuple<Tensor, Tensor, Tensor> roi_align_forward_cpu_kernel(
    const Tensor& input, const Tensor& rois, int64_t pooled_height,
    int64_t pooled_width, double spatial_scale, int64_t sampling_ratio,
    host::StringArg pool_mode, bool aligned) {
  const RoIAlignForward f =
      roi_align_prepare_forward(input, rois, pooled_height, pooled_width,
                                spatial_scale, sampling_ratio, pool_mode,
                                aligned);
  const RoIAlignShape& s = f.shape;
  const int64_t n = s.output_numel();
  if (n == 0) return f.outputs();
  // float16/bfloat16 are read directly (no float32 copy of the feature map)
  // and computed in float, as on CUDA.
  host::dispatch_floating_types<HostHalf, HostBFloat16>(
      host::dtype_of(input), "roi_align_forward_cpu", [&](auto tag) {
        using T = typename decltype(tag)::type;
        using A = acc_t<T>;
        const T* in = host::const_data<T>(f.input);
        const A* r = host::const_data<A>(f.rois);
        T* out = host::mutable_data<T>(f.output);
        A* ay = f.is_max() ? host::mutable_data<A>(f.argmax_y) : nullptr;
        A* ax = f.is_max() ? host::mutable_data<A>(f.argmax_x) : nullptr;
        // Over (RoI, channel) planes: a range computes each of its RoIs'
        // samples once and reads every channel through them.
        host::parallel_for(0, s.num_rois * s.channels, 1,
                           [&](int64_t begin, int64_t end) {
                             roi_align_forward_cpu<T>(
                                 in, r, s, static_cast<A>(spatial_scale),
                                 begin, end, out, ay, ax);
                           });
      });
  return f.outputs();
}

Tensor roi_align_backward_cpu_kernel(
    const Tensor& grad_output, const Tensor& rois,
    const Tensor& argmax_y, const Tensor& argmax_x,
    int64_t batch_size, int64_t channels, int64_t height, int64_t width,
    double spatial_scale, int64_t sampling_ratio, host::StringArg pool_mode,
    bool aligned) {
  const RoIAlignBackward b = roi_align_prepare_backward(
      grad_output, rois, argmax_y, argmax_x, batch_size, channels, height,
      width, spatial_scale, sampling_ratio, pool_mode, aligned,
      RoIGradLayout::kContiguousZeroed);
  if (b.shape.output_numel() == 0) return b.grad_input();
  host::dispatch_floating_types<HostHalf, HostBFloat16>(
      host::dtype_of(grad_output), "roi_align_backward_cpu", [&](auto tag) {
        using T = typename decltype(tag)::type;
        using A = acc_t<T>;
        const T* go = host::const_data<T>(b.grad_output);
        const A* r = host::const_data<A>(b.rois);
        const A* ay = b.is_max() ? host::const_data<A>(b.argmax_y) : nullptr;
        const A* ax = b.is_max() ? host::const_data<A>(b.argmax_x) : nullptr;
        A* gi = host::mutable_data<A>(b.grad_accum);
        // Parallel over channels: each channel's gradient is written by its
        // own output elements only, so this is race-free and sums in a fixed
        // order (in float for 16-bit grad_output, rounded once at the end).
        host::parallel_for(0, b.shape.channels, 1,
                           [&](int64_t begin, int64_t end) {
                             roi_align_backward_cpu<T>(
                                 go, r, ay, ax, b.shape,
                                 static_cast<A>(spatial_scale), begin, end,
                                 gi);
                           });
      });
  return b.grad_input();
}

}  // namespace

VISDET_IMPL_WITH_BACKWARD(CPU, roi_align, roi_align_forward_cpu_kernel,
                          roi_align_backward_cpu_kernel)

}  // namespace visdet_ops
