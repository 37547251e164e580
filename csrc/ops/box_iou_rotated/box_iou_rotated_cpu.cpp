#include <algorithm>
#include <cstddef>
#include <vector>

#include "box_iou_rotated_kernel.h"
#include "box_iou_rotated_launch.h"

namespace visdet_ops {

namespace {

template <typename T>
std::vector<rotated_detail::RotatedBox<T>> geometry(
    const T* boxes, int64_t n, bool clockwise, const ParallelRange& parallel) {
  std::vector<rotated_detail::RotatedBox<T>> out(static_cast<std::size_t>(n));
  parallel(0, n, 4096, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      out[static_cast<std::size_t>(i)] =
          rotated_detail::load_box(boxes + 5 * i, clockwise);
    }
  });
  return out;
}

}  // namespace

template <typename T>
void box_iou_rotated_cpu(const T* boxes1, const T* boxes2,
                         const BoxIouRotatedShape& shape,
                         const ParallelRange& parallel, T* out) {
  using box_iou_rotated_detail::pair_value;
  using rotated_detail::load_box;
  if (shape.aligned) {
    parallel(0, shape.rows, 2048, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        out[i] = pair_value(load_box(boxes1 + 5 * i, shape.clockwise),
                            load_box(boxes2 + 5 * i, shape.clockwise),
                            shape.mode);
      }
    });
    return;
  }
  const auto a = geometry(boxes1, shape.rows, shape.clockwise, parallel);
  const auto b = geometry(boxes2, shape.cols, shape.clockwise, parallel);
  // Grain: about 16k pairs per task.
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(shape.cols, 1));
  parallel(0, shape.rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const auto& row = a[static_cast<std::size_t>(i)];
      T* o = out + i * shape.cols;
      for (int64_t j = 0; j < shape.cols; ++j) {
        o[j] = pair_value(row, b[static_cast<std::size_t>(j)], shape.mode);
      }
    }
  });
}

template void box_iou_rotated_cpu<float>(const float*, const float*,
                                         const BoxIouRotatedShape&,
                                         const ParallelRange&, float*);
template void box_iou_rotated_cpu<double>(const double*, const double*,
                                          const BoxIouRotatedShape&,
                                          const ParallelRange&, double*);

}  // namespace visdet_ops
