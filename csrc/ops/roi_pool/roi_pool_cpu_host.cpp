// roi_pool: CPU host layer (torch-facing, through the host adapter), the
// mirror image of roi_pool_cuda_host.cpp. CPU loops: roi_pool_cpu.cpp. Each
// channel's gradient is summed by one thread in a fixed order: deterministic.
#include <tuple>

#include "common/host.h"
#include "common/scalar.h"
#include "roi_pool.h"

namespace visdet_ops {
namespace {

using host::Tensor;

std::tuple<Tensor, Tensor> roi_pool_forward_cpu_kernel(
    const Tensor& input, const Tensor& rois, int64_t pooled_height,
    int64_t pooled_width, double spatial_scale) {
  const RoIPoolForward f = roi_pool_prepare_forward(
      input, rois, pooled_height, pooled_width, spatial_scale);
  const RoIPoolShape& s = f.shape;
  const int64_t n = s.output_numel();
  if (n == 0) return f.outputs();
  // float16/bfloat16 are read directly (no float32 copy of the feature map).
  host::dispatch_floating_types<HostHalf, HostBFloat16>(
      host::dtype_of(input), "roi_pool_forward_cpu", [&](auto tag) {
        using T = typename decltype(tag)::type;
        using A = acc_t<T>;
        const T* in = host::const_data<T>(f.input);
        const A* r = host::const_data<A>(f.rois);
        T* out = host::mutable_data<T>(f.output);
        int32_t* am = host::mutable_data<int32_t>(f.argmax);
        // Over (RoI, channel) planes: a range finds each of its RoIs' bins
        // once and scans every channel through them.
        host::parallel_for(0, s.num_rois * s.channels, 1,
                           [&](int64_t begin, int64_t end) {
                             roi_pool_forward_cpu<T>(
                                 in, r, s, static_cast<A>(spatial_scale),
                                 begin, end, out, am);
                           });
      });
  return f.outputs();
}

Tensor roi_pool_backward_cpu_kernel(const Tensor& grad_output,
                                    const Tensor& rois, const Tensor& argmax,
                                    int64_t batch_size, int64_t channels,
                                    int64_t height, int64_t width) {
  const RoIPoolBackward b = roi_pool_prepare_backward(
      grad_output, rois, argmax, batch_size, channels, height, width);
  if (b.shape.output_numel() == 0) return b.grad_input();
  host::dispatch_floating_types<HostHalf, HostBFloat16>(
      host::dtype_of(grad_output), "roi_pool_backward_cpu", [&](auto tag) {
        using T = typename decltype(tag)::type;
        using A = acc_t<T>;
        const T* go = host::const_data<T>(b.grad_output);
        const A* r = host::const_data<A>(b.rois);
        const int32_t* am = host::const_data<int32_t>(b.argmax);
        A* gi = host::mutable_data<A>(b.grad_accum);
        // Parallel over channels: each channel's gradient is written by its
        // own output elements only, so this is race-free and sums in a fixed
        // order (in float for 16-bit grad_output, rounded once at the end).
        host::parallel_for(0, b.shape.channels, 1,
                           [&](int64_t begin, int64_t end) {
                             roi_pool_backward_cpu<T>(go, r, am, b.shape,
                                                      begin, end, gi);
                           });
      });
  return b.grad_input();
}

}  // namespace

VISDET_IMPL_WITH_BACKWARD(CPU, roi_pool, roi_pool_forward_cpu_kernel,
                          roi_pool_backward_cpu_kernel)

}  // namespace visdet_ops
