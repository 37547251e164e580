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

// Most samples per bin side that adaptive sampling (sampling_ratio <= 0)
// takes: keeps grid_h * grid_w within int.
constexpr int64_t kMaxAdaptiveGrid = int64_t{1} << 15;

// Samples per bin side with adaptive sampling: ceil(bin size), as mmcv, but
// at most map_side + 1 (and kMaxAdaptiveGrid). A bin of a RoI that lies in
// the feature map is at most map_side wide, so normal RoIs are unaffected;
// a RoI with a huge (finite) coordinate would otherwise take ~its size in
// samples per side, a loop of minutes (and an int overflow past 2^31).
// A negative or NaN bin size (reversed RoI) has no samples.
template <typename A>
VISDET_HOST_DEVICE VISDET_INLINE int adaptive_grid(A bin_size,
                                                   int64_t map_side) {
  const A g = ceil(bin_size);
  if (!(g > A(0))) return 0;
  const int64_t cap =
      map_side < kMaxAdaptiveGrid ? map_side + 1 : kMaxAdaptiveGrid;
  return g < static_cast<A>(cap) ? static_cast<int>(g)
                                 : static_cast<int>(cap);
}

}  // namespace visdet_ops
