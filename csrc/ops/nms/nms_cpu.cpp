#include <cstddef>
#include <vector>

#include "nms_kernel.h"
#include "nms_launch.h"

namespace visdet_ops {

template <typename T>
void nms_cpu(const T* boxes_sorted, const int64_t* classes_sorted, int64_t n,
             T iou_threshold, T offset, uint8_t* keep) {
  std::vector<uint8_t> suppressed(static_cast<std::size_t>(n), 0);
  for (int64_t i = 0; i < n; ++i) {
    keep[i] = 0;
    if (suppressed[i]) continue;
    keep[i] = 1;
    const T* a = boxes_sorted + 4 * i;
    for (int64_t j = i + 1; j < n; ++j) {
      if (suppressed[j] || !nms_detail::same_class(classes_sorted, i, j)) {
        continue;
      }
      if (nms_detail::suppresses(a, boxes_sorted + 4 * j, iou_threshold,
                                 offset)) {
        suppressed[j] = 1;
      }
    }
  }
}

template <typename T>
void nms_match_cpu(const T* boxes_sorted, int64_t n, T iou_threshold,
                   int64_t* leader) {
  constexpr int64_t kUnclaimed = -1;
  for (int64_t i = 0; i < n; ++i) leader[i] = kUnclaimed;
  for (int64_t i = 0; i < n; ++i) {
    if (leader[i] != kUnclaimed) continue;
    leader[i] = i;
    const T* a = boxes_sorted + 4 * i;
    for (int64_t j = i + 1; j < n; ++j) {
      if (leader[j] != kUnclaimed) continue;
      if (nms_detail::overlaps<true>(a, boxes_sorted + 4 * j, iou_threshold,
                                     T(0))) {
        leader[j] = i;
      }
    }
  }
}

template void nms_cpu<float>(const float*, const int64_t*, int64_t, float,
                             float, uint8_t*);
template void nms_cpu<double>(const double*, const int64_t*, int64_t, double,
                              double, uint8_t*);
template void nms_match_cpu<float>(const float*, int64_t, float, int64_t*);
template void nms_match_cpu<double>(const double*, int64_t, double, int64_t*);

}  // namespace visdet_ops
