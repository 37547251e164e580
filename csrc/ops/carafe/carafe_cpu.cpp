#include "carafe_kernel.h"
#include "carafe_launch.h"
#include "common/scalar.h"

namespace visdet_ops {

namespace {
// Storage to compute type: float16/bfloat16 (HostHalf, HostBFloat16) are read
// directly and computed in float; float and double as they are.
template <typename T>
struct Load {
  acc_t<T> operator()(T v) const { return to_acc(v); }
};
}  // namespace

template <typename T>
void carafe_forward_cpu(const T* features, const T* masks, const CarafeShape& s,
                        int64_t begin, int64_t end, T* output) {
  for (int64_t e = begin; e < end; ++e) {
    output[e] = from_acc<T>(carafe_detail::forward_element<acc_t<T>>(
        e, features, masks, s, Load<T>()));
  }
}

template <typename T>
void carafe_grad_features_cpu(const T* grad_output, const T* masks,
                              const CarafeShape& s, int64_t begin, int64_t end,
                              T* grad_features) {
  for (int64_t e = begin; e < end; ++e) {
    grad_features[e] = from_acc<T>(carafe_detail::grad_features_element<acc_t<T>>(
        e, grad_output, masks, s, Load<T>()));
  }
}

template <typename T>
void carafe_grad_masks_cpu(const T* grad_output, const T* features,
                           const CarafeShape& s, int64_t begin, int64_t end,
                           T* grad_masks) {
  for (int64_t e = begin; e < end; ++e) {
    grad_masks[e] = from_acc<T>(carafe_detail::grad_masks_element<acc_t<T>>(
        e, grad_output, features, s, Load<T>()));
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
VISDET_FOR_HOST_FLOATING_TYPES(VISDET_INSTANTIATE)
#undef VISDET_INSTANTIATE

}  // namespace visdet_ops
