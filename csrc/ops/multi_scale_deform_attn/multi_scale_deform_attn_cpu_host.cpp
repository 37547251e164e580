// multi_scale_deformable_attn: CPU host layer (torch-facing, through the host
// adapter), the mirror image of multi_scale_deform_attn_cuda_host.cpp. CPU
// loops: multi_scale_deform_attn_cpu.cpp. The backward gives each (batch,
// head) to one thread: no atomics, the same sums in the same order.
#include <algorithm>
#include <tuple>

#include "common/host.h"
#include "common/scalar.h"
#include "multi_scale_deform_attn.h"

namespace visdet_ops {
namespace {

using host::Tensor;

Tensor msda_forward_cpu_kernel(const Tensor& value,
                               const Tensor& spatial_shapes,
                               const Tensor& level_start_index,
                               const Tensor& sampling_locations,
                               const Tensor& attention_weights,
                               int64_t im2col_step) {
  const MSDAForward f =
      msda_prepare_forward(value, spatial_shapes, level_start_index,
                           sampling_locations, attention_weights, im2col_step);
  const MSDAShape& s = f.shape;
  if (f.output.numel() == 0) return f.output;
  // float16/bfloat16 value is read directly (no float32 copy) and sampled in
  // float; sampling locations and attention weights are in the compute dtype.
  host::dispatch_floating_types<HostHalf, HostBFloat16>(
      host::dtype_of(value), "msda_forward_cpu", [&](auto tag) {
        using T = typename decltype(tag)::type;
        using A = acc_t<T>;
        const T* v = host::const_data<T>(f.value);
        const int64_t* shapes = host::const_data<int64_t>(f.spatial_shapes);
        const int64_t* start = host::const_data<int64_t>(f.level_start_index);
        const A* loc = host::const_data<A>(f.sampling_locations);
        const A* attn = host::const_data<A>(f.attention_weights);
        T* out = host::mutable_data<T>(f.output);
        const int64_t work = std::max<int64_t>(
            1, s.num_levels * s.num_points * s.head_dim);
        const int64_t grain = std::max<int64_t>(1, 32768 / work);
        host::parallel_for(0, s.rows(), grain, [&](int64_t begin, int64_t end) {
          msda_forward_cpu<T>(v, shapes, start, loc, attn, s, begin, end, out);
        });
      });
  return f.output;
}

std::tuple<Tensor, Tensor, Tensor> msda_backward_cpu_kernel(
    const Tensor& grad_output, const Tensor& value,
    const Tensor& spatial_shapes, const Tensor& level_start_index,
    const Tensor& sampling_locations, const Tensor& attention_weights,
    int64_t im2col_step) {
  const MSDABackward b = msda_prepare_backward(
      grad_output, value, spatial_shapes, level_start_index,
      sampling_locations, attention_weights, im2col_step);
  const MSDAShape& s = b.shape;
  if (b.grad_output.numel() > 0) {
    // Accumulated in the compute dtype (float32 for 16-bit value), each
    // gradient returned in its argument's dtype (rounded once).
    host::dispatch_floating_types<HostHalf, HostBFloat16>(
        host::dtype_of(value), "msda_backward_cpu", [&](auto tag) {
          using T = typename decltype(tag)::type;
          using A = acc_t<T>;
          const T* g = host::const_data<T>(b.grad_output);
          const T* v = host::const_data<T>(b.value);
          const int64_t* shapes = host::const_data<int64_t>(b.spatial_shapes);
          const int64_t* start =
              host::const_data<int64_t>(b.level_start_index);
          const A* loc = host::const_data<A>(b.sampling_locations);
          const A* attn = host::const_data<A>(b.attention_weights);
          A* gv = host::mutable_data<A>(b.grad_value);
          A* gl = host::mutable_data<A>(b.grad_sampling_locations);
          A* ga = host::mutable_data<A>(b.grad_attention_weights);
          host::parallel_for(0, s.batch * s.num_heads, 1,
                             [&](int64_t begin, int64_t end) {
                               msda_backward_cpu<T>(g, v, shapes, start, loc,
                                                    attn, s, begin, end, gv,
                                                    gl, ga);
                             });
        });
  }
  return b.grads();
}

}  // namespace

VISDET_IMPL_WITH_BACKWARD(CPU, multi_scale_deformable_attn,
                          msda_forward_cpu_kernel, msda_backward_cpu_kernel)

}  // namespace visdet_ops
