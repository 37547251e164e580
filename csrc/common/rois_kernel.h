// Validity of RoIs [K, 5] (batch_index, x1, y1, x2, y2). Torch-free.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/macros.h"

namespace visdet_ops {

enum RoIFlags : int { kRoINonFinite = 1, kRoIBadBatch = 2 };

// Flags of one RoI: a non-finite coordinate would make the sample grid
// unbounded, a batch index outside [0, batch_size) would read outside the
// input. Written so that NaN sets both flags it can.
template <typename T>
VISDET_HOST_DEVICE VISDET_INLINE int roi_flags(const T* roi,
                                               int64_t batch_size) {
#if defined(__CUDA_ARCH__)
  using ::isfinite;
#else
  using std::isfinite;
#endif
  int flags = 0;
  for (int j = 0; j < 5; ++j) {
    if (!isfinite(roi[j])) flags |= kRoINonFinite;
  }
  if (!(roi[0] >= T(0) && roi[0] < static_cast<T>(batch_size))) {
    flags |= kRoIBadBatch;
  }
  return flags;
}

}  // namespace visdet_ops
