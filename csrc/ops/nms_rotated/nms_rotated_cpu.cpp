#include <algorithm>
#include <cstddef>
#include <vector>

#include "nms_rotated_kernel.h"
#include "nms_rotated_launch.h"

namespace visdet_ops {

namespace {

using rotated_detail::RotatedBox;

constexpr int64_t kBlock = 64;

// Greedy NMS over the sorted positions members[0..count) (ascending, so in
// descending score order): a kept box suppresses every later member it
// overlaps; keep[] is indexed by sorted position. The decisions are those of
// the one-box-at-a-time loop: a member is dropped exactly when an earlier
// kept member suppresses it. Blocks of 64 members: the block is resolved in
// order (its kept rows against its later rows), then every later member not
// yet dropped is tested against the block's kept rows, in parallel over the
// members (each task writes only its own members' flags). Dropped members
// are never tested again, so the pairs tested are those of the serial loop.
template <typename T>
void nms_members(const std::vector<RotatedBox<T>>& boxes,
                 const int64_t* members, int64_t count, T iou_threshold,
                 const ParallelRange& parallel, uint8_t* keep) {
  using nms_rotated_detail::suppresses;
  std::vector<uint8_t> dropped(static_cast<std::size_t>(count), 0);
  uint8_t* gone = dropped.data();
  auto box = [&](int64_t member) -> const RotatedBox<T>& {
    return boxes[static_cast<std::size_t>(members[member])];
  };
  int64_t kept_rows[kBlock];
  for (int64_t first = 0; first < count; first += kBlock) {
    const int64_t last = std::min(count, first + kBlock);
    int64_t kept_count = 0;
    for (int64_t r = first; r < last; ++r) {
      if (gone[r]) continue;
      keep[members[r]] = 1;
      kept_rows[kept_count++] = r;
      const RotatedBox<T>& a = box(r);
      for (int64_t s = r + 1; s < last; ++s) {
        if (!gone[s] && suppresses(a, box(s), iou_threshold)) gone[s] = 1;
      }
    }
    if (last == count || kept_count == 0) continue;
    // About 4096 pair tests per task.
    const int64_t grain = std::max<int64_t>(16, 4096 / kept_count);
    parallel(last, count, grain, [&](int64_t begin, int64_t end) {
      for (int64_t s = begin; s < end; ++s) {
        if (gone[s]) continue;
        const RotatedBox<T>& b = box(s);
        for (int64_t k = 0; k < kept_count; ++k) {
          if (suppresses(box(kept_rows[k]), b, iou_threshold)) {
            gone[s] = 1;
            break;
          }
        }
      }
    });
  }
}

}  // namespace

// With classes, each class is its own greedy pass over its members in sorted
// order (a box is suppressed only by earlier kept boxes of its class, so the
// decisions are those of one pass over all boxes that skips other classes),
// which compares sum(class size^2) pairs instead of n^2.
template <typename T>
void nms_rotated_cpu(const T* boxes_sorted, const int64_t* classes_sorted,
                     int64_t n, T iou_threshold, bool clockwise,
                     const ParallelRange& parallel, uint8_t* keep) {
  const std::size_t size = static_cast<std::size_t>(n);
  std::vector<RotatedBox<T>> boxes(size);
  std::vector<int64_t> members(size);
  for (int64_t i = 0; i < n; ++i) {
    keep[i] = 0;
    members[static_cast<std::size_t>(i)] = i;
  }
  parallel(0, n, 4096, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      boxes[static_cast<std::size_t>(i)] =
          rotated_detail::load_box(boxes_sorted + 5 * i, clockwise);
    }
  });
  if (classes_sorted == nullptr) {
    nms_members(boxes, members.data(), n, iou_threshold, parallel, keep);
    return;
  }
  // Group by class, each group in ascending sorted position (stable).
  std::stable_sort(members.begin(), members.end(),
                   [classes_sorted](int64_t a, int64_t b) {
                     return classes_sorted[a] < classes_sorted[b];
                   });
  for (int64_t first = 0; first < n;) {
    const int64_t cls = classes_sorted[members[static_cast<std::size_t>(first)]];
    int64_t last = first + 1;
    while (last < n && classes_sorted[members[static_cast<std::size_t>(last)]] == cls) {
      ++last;
    }
    nms_members(boxes, members.data() + first, last - first, iou_threshold,
                parallel, keep);
    first = last;
  }
}

template void nms_rotated_cpu<float>(const float*, const int64_t*, int64_t,
                                     float, bool, const ParallelRange&,
                                     uint8_t*);
template void nms_rotated_cpu<double>(const double*, const int64_t*, int64_t,
                                      double, bool, const ParallelRange&,
                                      uint8_t*);

}  // namespace visdet_ops
