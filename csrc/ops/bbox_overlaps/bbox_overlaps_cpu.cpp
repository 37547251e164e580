#include "bbox_overlaps_kernel.h"
#include "bbox_overlaps_launch.h"

namespace visdet_ops {

template <typename T>
void bbox_overlaps_cpu(const T* boxes1, const T* boxes2,
                       const BboxOverlapsShape& shape, T offset, T eps,
                       int64_t row_begin, int64_t row_end, T* out) {
  using bbox_overlaps_detail::overlap;
  for (int64_t r = row_begin; r < row_end; ++r) {
    const int64_t batch = r / shape.rows;
    const T* a = boxes1 + 4 * r;
    if (shape.aligned) {
      out[r] = overlap(a, boxes2 + 4 * r, shape.mode, offset, eps);
      continue;
    }
    const T* b = boxes2 + 4 * batch * shape.cols;
    T* o = out + r * shape.cols;
    for (int64_t j = 0; j < shape.cols; ++j) {
      o[j] = overlap(a, b + 4 * j, shape.mode, offset, eps);
    }
  }
}

template void bbox_overlaps_cpu<float>(const float*, const float*,
                                       const BboxOverlapsShape&, float, float,
                                       int64_t, int64_t, float*);
template void bbox_overlaps_cpu<double>(const double*, const double*,
                                        const BboxOverlapsShape&, double, double,
                                        int64_t, int64_t, double*);

}  // namespace visdet_ops
