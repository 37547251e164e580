#include <algorithm>
#include <cstddef>
#include <vector>

#include "nms_kernel.h"
#include "nms_launch.h"

namespace visdet_ops {

namespace {

// Greedy NMS over the sorted positions members[0..count) (ascending, so in
// descending score order): a kept box suppresses every later member it
// overlaps. keep[] is indexed by sorted position. The members' boxes and
// areas are gathered first, so the O(count^2) loop reads contiguous memory
// (a class's boxes are spread over the sorted array).
template <typename T>
void nms_members(const T* boxes_sorted, const int64_t* members, int64_t count,
                 T iou_threshold, T offset, uint8_t* keep) {
  std::vector<T> boxes(static_cast<std::size_t>(4 * count));
  std::vector<T> areas(static_cast<std::size_t>(count));
  std::vector<uint8_t> suppressed(static_cast<std::size_t>(count), 0);
  for (int64_t a = 0; a < count; ++a) {
    const T* src = boxes_sorted + 4 * members[a];
    std::copy(src, src + 4, boxes.begin() + 4 * a);
    areas[static_cast<std::size_t>(a)] = nms_detail::box_area(src, offset);
  }
  for (int64_t a = 0; a < count; ++a) {
    if (suppressed[static_cast<std::size_t>(a)]) continue;
    keep[members[a]] = 1;
    const T* box = boxes.data() + 4 * a;
    const T area = areas[static_cast<std::size_t>(a)];
    for (int64_t b = a + 1; b < count; ++b) {
      if (suppressed[static_cast<std::size_t>(b)]) continue;
      // nms_detail::suppresses, with the areas computed once.
      if (nms_detail::overlaps_with_areas<false>(
              box, boxes.data() + 4 * b, area,
              areas[static_cast<std::size_t>(b)], iou_threshold, offset)) {
        suppressed[static_cast<std::size_t>(b)] = 1;
      }
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
