#include <algorithm>
#include <cstddef>
#include <vector>

#include "nms_kernel.h"
#include "nms_launch.h"

namespace visdet_ops {

namespace {

// Greedy NMS over the sorted positions members[0..count) (ascending, so in
// descending score order): a kept box suppresses every later member it
// overlaps. keep[] is indexed by sorted position. The members' coordinates
// and areas are gathered first into one array each (a class's boxes are
// spread over the sorted array), and the inner loop has no branch, so the
// compiler vectorizes the O(count^2) part.
template <typename T>
void nms_members(const T* boxes_sorted, const int64_t* members, int64_t count,
                 T iou_threshold, T offset, uint8_t* keep) {
  const std::size_t n = static_cast<std::size_t>(count);
  std::vector<T> x1(n), y1(n), x2(n), y2(n), areas(n);
  std::vector<uint8_t> suppressed(n, 0);
  for (std::size_t a = 0; a < n; ++a) {
    const T* src = boxes_sorted + 4 * members[a];
    x1[a] = src[0];
    y1[a] = src[1];
    x2[a] = src[2];
    y2[a] = src[3];
    areas[a] = nms_detail::box_area(src, offset);
  }
  uint8_t* __restrict sup = suppressed.data();
  const T* __restrict px1 = x1.data();
  const T* __restrict py1 = y1.data();
  const T* __restrict px2 = x2.data();
  const T* __restrict py2 = y2.data();
  const T* __restrict par = areas.data();
  for (std::size_t a = 0; a < n; ++a) {
    if (sup[a]) continue;
    keep[members[a]] = 1;
    const T box[4] = {px1[a], py1[a], px2[a], py2[a]};
    const T area = par[a];
    // Branch-free: marking an already suppressed box again changes nothing.
    for (std::size_t b = a + 1; b < n; ++b) {
      const T other[4] = {px1[b], py1[b], px2[b], py2[b]};
      sup[b] |= static_cast<uint8_t>(nms_detail::overlaps_with_areas<false>(
          box, other, area, par[b], iou_threshold, offset));
    }
  }
}

}  // namespace

// With classes, each class is its own greedy pass over its members in sorted
// order (a box is suppressed only by earlier kept boxes of its class, so the
// decisions are those of one pass over all boxes that skips other classes),
// which compares sum(class size^2) pairs instead of n^2.
template <typename T>
void nms_cpu(const T* boxes_sorted, const int64_t* classes_sorted, int64_t n,
             T iou_threshold, T offset, uint8_t* keep) {
  std::vector<int64_t> members(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    keep[i] = 0;
    members[static_cast<std::size_t>(i)] = i;
  }
  if (classes_sorted == nullptr) {
    nms_members(boxes_sorted, members.data(), n, iou_threshold, offset, keep);
    return;
  }
  // Group by class, each group in ascending sorted position (stable).
  std::stable_sort(members.begin(), members.end(),
                   [classes_sorted](int64_t a, int64_t b) {
                     return classes_sorted[a] < classes_sorted[b];
                   });
  for (int64_t first = 0; first < n;) {
    int64_t last = first + 1;
    while (last < n && classes_sorted[members[static_cast<std::size_t>(last)]] ==
                           classes_sorted[members[static_cast<std::size_t>(first)]]) {
      ++last;
    }
    nms_members(boxes_sorted, members.data() + first, last - first,
                iou_threshold, offset, keep);
    first = last;
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
