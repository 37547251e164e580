#include "roi_pool_kernel.h"
#include "roi_pool_launch.h"

namespace visdet_ops {

template <typename T>
void roi_pool_forward_cpu(const T* input, const acc_t<T>* rois,
                          const RoIPoolShape& s, acc_t<T> spatial_scale,
                          int64_t begin, int64_t end, T* output,
                          int32_t* argmax) {
  for (int64_t index = begin; index < end; ++index) {
    roi_pool_detail::roi_pool_forward_element<T, int64_t>(
        index, input, rois, s.batch_size, s.channels, s.height, s.width,
        s.pooled_h, s.pooled_w, spatial_scale, output, argmax);
  }
}

template <typename T>
void roi_pool_backward_cpu(const T* grad_output, const acc_t<T>* rois,
                           const int32_t* argmax, const RoIPoolShape& s,
                           int64_t c_begin, int64_t c_end,
                           acc_t<T>* grad_input) {
  auto add = [grad_input](int64_t offset, acc_t<T> value) {
    grad_input[offset] += value;
  };
  const int64_t plane = s.pooled_h * s.pooled_w;
  for (int64_t k = 0; k < s.num_rois; ++k) {
    for (int64_t c = c_begin; c < c_end; ++c) {
      const int64_t first = (k * s.channels + c) * plane;
      for (int64_t index = first; index < first + plane; ++index) {
        roi_pool_detail::roi_pool_backward_element<T, int64_t>(
            index, grad_output, rois, argmax, s.batch_size, s.channels,
            s.height, s.width, s.pooled_h, s.pooled_w, add);
      }
    }
  }
}

#define VISDET_INSTANTIATE(T)                                                \
  template void roi_pool_forward_cpu<T>(const T*, const acc_t<T>*,           \
                                        const RoIPoolShape&, acc_t<T>,       \
                                        int64_t, int64_t, T*, int32_t*);     \
  template void roi_pool_backward_cpu<T>(const T*, const acc_t<T>*,          \
                                         const int32_t*, const RoIPoolShape&, \
                                         int64_t, int64_t, acc_t<T>*);
VISDET_INSTANTIATE(float)
VISDET_INSTANTIATE(double)
VISDET_INSTANTIATE(HostHalf)
VISDET_INSTANTIATE(HostBFloat16)
#undef VISDET_INSTANTIATE

}  // namespace visdet_ops
