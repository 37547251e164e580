#include "common/scalar.h"
#include "deform_roi_pool_kernel.h"
#include "deform_roi_pool_launch.h"

namespace visdet_ops {
namespace deform_roi_pool_detail {

// float16/bfloat16 storage on the CPU: read and written through scalar.h's
// conversions (the CUDA file specialises the same for __half/__nv_bfloat16).
template <typename S>
struct HostValueCast {
  static inline float load(S v) { return to_acc(v); }
  static inline S store(float v) { return from_acc<S>(v); }
};
template <>
struct ValueCast<float, HostHalf> : HostValueCast<HostHalf> {};
template <>
struct ValueCast<float, HostBFloat16> : HostValueCast<HostBFloat16> {};

}  // namespace deform_roi_pool_detail

template <typename S, typename T>
void deform_roi_pool_forward_cpu(const S* input, const T* rois,
                                 const S* offset, const DeformRoIPoolShape& s,
                                 T spatial_scale, T gamma, int64_t begin,
                                 int64_t end, S* output) {
  const auto d = deform_roi_pool_detail::dims_of<int64_t>(s);
  for (int64_t index = begin; index < end; ++index) {
    deform_roi_pool_detail::forward_element<S, T, int64_t>(
        index, input, rois, offset, d, spatial_scale, s.sampling_ratio, gamma,
        output);
  }
}

template <typename S, typename T>
void deform_roi_pool_backward_input_cpu(const S* grad_output, const T* rois,
                                        const S* offset,
                                        const DeformRoIPoolShape& s,
                                        T spatial_scale, T gamma,
                                        int64_t channel_begin,
                                        int64_t channel_end, T* grad_input) {
  const auto d = deform_roi_pool_detail::dims_of<int64_t>(s);
  const int64_t bins = s.pooled_h * s.pooled_w;
  auto add = [grad_input](int64_t offset, T value) {
    grad_input[offset] += value;
  };
  for (int64_t c = channel_begin; c < channel_end; ++c) {
    for (int64_t k = 0; k < s.num_rois; ++k) {
      const int64_t first = (k * s.channels + c) * bins;
      for (int64_t index = first; index < first + bins; ++index) {
        deform_roi_pool_detail::backward_input_element<S, T, int64_t>(
            index, grad_output, rois, offset, d, spatial_scale,
            s.sampling_ratio, gamma, add);
      }
    }
  }
}

template <typename S, typename T>
void deform_roi_pool_backward_offset_cpu(const S* grad_output, const S* input,
                                         const T* rois, const S* offset,
                                         const DeformRoIPoolShape& s,
                                         T spatial_scale, T gamma,
                                         int64_t begin, int64_t end,
                                         S* grad_offset) {
  using Cast = deform_roi_pool_detail::ValueCast<T, S>;
  const auto d = deform_roi_pool_detail::dims_of<int64_t>(s);
  const int64_t bins = s.pooled_h * s.pooled_w;
  for (int64_t bin = begin; bin < end; ++bin) {
    const auto g = deform_roi_pool_detail::backward_offset_partial<S, T, int64_t>(
        bin, 0, 1, grad_output, input, rois, offset, d, spatial_scale,
        s.sampling_ratio, gamma);
    const int64_t k = bin / bins;
    const int64_t within = bin % bins;
    grad_offset[k * 2 * bins + within] = Cast::store(g.dx * g.scale_x);
    grad_offset[k * 2 * bins + bins + within] = Cast::store(g.dy * g.scale_y);
  }
}

#define VISDET_INSTANTIATE(S, T)                                              \
  template void deform_roi_pool_forward_cpu<S, T>(                            \
      const S*, const T*, const S*, const DeformRoIPoolShape&, T, T, int64_t, \
      int64_t, S*);                                                           \
  template void deform_roi_pool_backward_input_cpu<S, T>(                     \
      const S*, const T*, const S*, const DeformRoIPoolShape&, T, T, int64_t, \
      int64_t, T*);                                                           \
  template void deform_roi_pool_backward_offset_cpu<S, T>(                    \
      const S*, const S*, const T*, const S*, const DeformRoIPoolShape&, T, T, \
      int64_t, int64_t, S*);
VISDET_INSTANTIATE(float, float)
VISDET_INSTANTIATE(double, double)
VISDET_INSTANTIATE(HostHalf, float)
VISDET_INSTANTIATE(HostBFloat16, float)
#undef VISDET_INSTANTIATE

}  // namespace visdet_ops
