#include "deform_roi_pool_kernel.h"
#include "deform_roi_pool_launch.h"

namespace visdet_ops {
template <typename T>
void deform_roi_pool_forward_cpu(const T* input, const T* rois,
                                 const T* offset, const DeformRoIPoolShape& s,
                                 T spatial_scale, T gamma, int64_t begin,
                                 int64_t end, T* output) {
  const auto d = deform_roi_pool_detail::dims_of<int64_t>(s);
  for (int64_t index = begin; index < end; ++index) {
    deform_roi_pool_detail::forward_element<T, T, int64_t>(
        index, input, rois, offset, d, spatial_scale, s.sampling_ratio, gamma,
        output);
  }
}

template <typename T>
void deform_roi_pool_backward_input_cpu(const T* grad_output, const T* rois,
                                        const T* offset,
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
        deform_roi_pool_detail::backward_input_element<T, T, int64_t>(
            index, grad_output, rois, offset, d, spatial_scale,
            s.sampling_ratio, gamma, add);
      }
    }
  }
}

template <typename T>
void deform_roi_pool_backward_offset_cpu(const T* grad_output, const T* input,
                                         const T* rois, const T* offset,
                                         const DeformRoIPoolShape& s,
                                         T spatial_scale, T gamma,
                                         int64_t begin, int64_t end,
                                         T* grad_offset) {
  const auto d = deform_roi_pool_detail::dims_of<int64_t>(s);
  const int64_t bins = s.pooled_h * s.pooled_w;
  for (int64_t bin = begin; bin < end; ++bin) {
    const auto g = deform_roi_pool_detail::backward_offset_partial<T, T, int64_t>(
        bin, 0, 1, grad_output, input, rois, offset, d, spatial_scale,
        s.sampling_ratio, gamma);
    const int64_t k = bin / bins;
    const int64_t within = bin % bins;
    grad_offset[k * 2 * bins + within] = g.dx * g.scale_x;
    grad_offset[k * 2 * bins + bins + within] = g.dy * g.scale_y;
  }
}

#define VISDET_INSTANTIATE(T)                                                 \
  template void deform_roi_pool_forward_cpu<T>(                               \
      const T*, const T*, const T*, const DeformRoIPoolShape&, T, T, int64_t, \
      int64_t, T*);                                                           \
  template void deform_roi_pool_backward_input_cpu<T>(                        \
      const T*, const T*, const T*, const DeformRoIPoolShape&, T, T, int64_t, \
      int64_t, T*);                                                           \
  template void deform_roi_pool_backward_offset_cpu<T>(                       \
      const T*, const T*, const T*, const T*, const DeformRoIPoolShape&, T, T, \
      int64_t, int64_t, T*);
VISDET_INSTANTIATE(float)
VISDET_INSTANTIATE(double)
#undef VISDET_INSTANTIATE

}  // namespace visdet_ops
