#include "rois_kernel.h"
#include "rois_launch.h"

namespace visdet_ops {

template <typename T>
int rois_flags_cpu(const T* rois, int64_t k, int columns, int64_t batch_size) {
  int flags = 0;
  for (int64_t i = 0; i < k; ++i) {
    flags |= roi_flags(rois + columns * i, batch_size, columns);
  }
  return flags;
}

template int rois_flags_cpu<float>(const float*, int64_t, int, int64_t);
template int rois_flags_cpu<double>(const double*, int64_t, int, int64_t);

}  // namespace visdet_ops
