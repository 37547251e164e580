// Validity of RoIs [K, 5] (batch_index, x1, y1, x2, y2). Torch-free.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/macros.h"
#include "common/scalar.h"

namespace visdet_ops {

enum RoIFlags : int { kRoINonFinite = 1, kRoIBadBatch = 2 };

// Flags of one RoI: a non-finite coordinate would make the sample grid
// unbounded, a batch index outside [0, batch_size) would read outside the
// input. Written so that NaN sets both flags it can. T is a storage type
// (float, double; __half and __nv_bfloat16 in CUDA code), tested in acc_t<T>.
//
// The kernels of the RoI ops call this for their own RoI too: an invalid RoI
// then gives NaN output and no gradient, never an out-of-bounds access, so
// the host need not wait for a validation result before launching them.
template <typename T>
VISDET_HOST_DEVICE VISDET_INLINE int roi_flags(const T* roi,
                                               int64_t batch_size) {
#if defined(__CUDA_ARCH__)
  using ::isfinite;
#else
  using std::isfinite;
#endif
  using A = acc_t<T>;
  int flags = 0;
  for (int j = 0; j < 5; ++j) {
    if (!isfinite(to_acc(roi[j]))) flags |= kRoINonFinite;
  }
  const A batch = to_acc(roi[0]);
  if (!(batch >= A(0) && batch < static_cast<A>(batch_size))) {
    flags |= kRoIBadBatch;
  }
  return flags;
}

}  // namespace visdet_ops
