#include "carafe_kernel.h"
#include "carafe_launch.h"

namespace visdet_ops {

namespace {
template <typename T>
struct Identity {
  T operator()(T v) const { return v; }
};
}  // namespace

template <typename T>
void carafe_forward_cpu(const T* features, const T* masks, const CarafeShape& s,
                        int64_t begin, int64_t end, T* output) {
  for (int64_t e = begin; e < end; ++e) {
    output[e] = carafe_detail::forward_element<T>(e, features, masks, s,
                                                  Identity<T>());
  }
}

template <typename T>
void carafe_grad_features_cpu(const T* grad_output, const T* masks,
                              const CarafeShape& s, int64_t begin, int64_t end,
                              T* grad_features) {
  for (int64_t e = begin; e < end; ++e) {
    grad_features[e] = carafe_detail::grad_features_element<T>(
        e, grad_output, masks, s, Identity<T>());
  }
}

template <typename T>
void carafe_grad_masks_cpu(const T* grad_output, const T* features,
                           const CarafeShape& s, int64_t begin, int64_t end,
                           T* grad_masks) {
  for (int64_t e = begin; e < end; ++e) {
    grad_masks[e] = carafe_detail::grad_masks_element<T>(
        e, grad_output, features, s, Identity<T>());
  }
}

#define VISDET_INSTANTIATE(T)                                                 \
  template void carafe_forward_cpu<T>(const T*, const T*, const CarafeShape&, \
                                      int64_t, int64_t, T*);                  \
  template void carafe_grad_features_cpu<T>(                                  \
      const T*, const T*, const CarafeShape&, int64_t, int64_t, T*);          \
  template void carafe_grad_masks_cpu<T>(const T*, const T*,                  \
                                         const CarafeShape&, int64_t,         \
                                         int64_t, T*);
VISDET_INSTANTIATE(float)
VISDET_INSTANTIATE(double)
#undef VISDET_INSTANTIATE

}  // namespace visdet_ops
