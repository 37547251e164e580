// deform_roi_pool: CPU host layer (torch-facing, through the host adapter),
// the mirror image of deform_roi_pool_cuda_host.cpp. CPU loops:
// deform_roi_pool_cpu.cpp. Each channel's input gradient is summed by one
// thread in a fixed order: deterministic.
#include <algorithm>
#include <optional>
#include <tuple>

#include "common/host.h"
#include "common/scalar.h"
#include "deform_roi_pool.h"

namespace visdet_ops {
namespace {

using host::Tensor;

Tensor deform_roi_pool_forward_cpu_kernel(
    const Tensor& input, const Tensor& rois,
    const std::optional<Tensor>& offset, int64_t pooled_height,
    int64_t pooled_width, double spatial_scale, int64_t sampling_ratio,
    double gamma) {
  const DeformRoIPoolForward f = deform_roi_pool_prepare_forward(
      input, rois, offset, pooled_height, pooled_width, spatial_scale,
      sampling_ratio, gamma);
  const DeformRoIPoolShape& s = f.shape;
  const int64_t n = s.output_numel();
  if (n == 0) return f.output;
  // float16/bfloat16 are read directly (no float32 copy) and computed in float.
  host::dispatch_floating_types<HostHalf, HostBFloat16>(
      host::dtype_of(input), "deform_roi_pool_forward_cpu", [&](auto tag) {
        using S = typename decltype(tag)::type;
        using T = acc_t<S>;
        const S* in = host::const_data<S>(f.input);
        const T* r = host::const_data<T>(f.rois);
        const S* off = f.has_offset ? host::const_data<S>(f.offset) : nullptr;
        S* out = host::mutable_data<S>(f.output);
        const int64_t grain = std::max<int64_t>(1, s.pooled_h * s.pooled_w);
        host::parallel_for(0, n, grain, [&](int64_t begin, int64_t end) {
          deform_roi_pool_forward_cpu<S, T>(
              in, r, off, s, static_cast<T>(spatial_scale),
              static_cast<T>(gamma), begin, end, out);
        });
      });
  return f.output;
}

std::tuple<Tensor, Tensor> deform_roi_pool_backward_cpu_kernel(
    const Tensor& grad_output, const Tensor& input, const Tensor& rois,
    const std::optional<Tensor>& offset, double spatial_scale,
    int64_t sampling_ratio, double gamma) {
  const DeformRoIPoolBackward b = deform_roi_pool_prepare_backward(
      grad_output, input, rois, offset, spatial_scale, sampling_ratio, gamma);
  const DeformRoIPoolShape& s = b.shape;
  if (s.output_numel() == 0) return b.outputs();
  host::dispatch_floating_types<HostHalf, HostBFloat16>(
      host::dtype_of(input), "deform_roi_pool_backward_cpu", [&](auto tag) {
        using S = typename decltype(tag)::type;
        using T = acc_t<S>;
        const S* go = host::const_data<S>(b.grad_output);
        const S* in = host::const_data<S>(b.input);
        const T* r = host::const_data<T>(b.rois);
        const S* off = b.has_offset ? host::const_data<S>(b.offset) : nullptr;
        const auto scale = static_cast<T>(spatial_scale);
        const auto g = static_cast<T>(gamma);
        // In the compute dtype (a float32 buffer for 16-bit input, rounded
        // once).
        T* gi = host::mutable_data<T>(b.grad_input);
        // Disjoint channel ranges: no races, and the same sums in the same
        // order whatever the thread count.
        host::parallel_for(0, s.channels, 1, [&](int64_t begin, int64_t end) {
          deform_roi_pool_backward_input_cpu<S, T>(go, r, off, s, scale, g,
                                                   begin, end, gi);
        });
        if (off != nullptr) {
          S* goff = host::mutable_data<S>(b.grad_offset);
          host::parallel_for(
              0, s.num_bins(), 16, [&](int64_t begin, int64_t end) {
                deform_roi_pool_backward_offset_cpu<S, T>(
                    go, in, r, off, s, scale, g, begin, end, goff);
              });
        }
      });
  return b.outputs();
}

}  // namespace

VISDET_IMPL_WITH_BACKWARD(CPU, deform_roi_pool,
                          deform_roi_pool_forward_cpu_kernel,
                          deform_roi_pool_backward_cpu_kernel)

}  // namespace visdet_ops
