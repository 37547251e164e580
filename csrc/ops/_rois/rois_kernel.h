// Validity of RoIs: [K, 5] (batch_index, x1, y1, x2, y2) and, for the
// rotated ops, [K, 6] (batch_index, x, y, w, h, angle). Torch-free.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/macros.h"
#include "common/scalar.h"

namespace visdet_ops {

enum RoIFlags : int { kRoINonFinite = 1, kRoIBadBatch = 2 };

// Values per RoI: axis-aligned boxes, and rotated boxes (roi_align_rotated).
constexpr int kRoIColumns = 5;
constexpr int kRotatedRoIColumns = 6;

// Flags of one RoI of `columns` values, the batch index first: a non-finite
// value would make the sample grid unbounded, a batch index outside
// [0, batch_size) would read outside the input. Written so that NaN sets both
// flags it can. T is a storage type (float, double; __half and __nv_bfloat16
// in CUDA code), tested in acc_t<T>.
//
// The kernels of the RoI ops call this for their own RoI too: an invalid RoI
// then gives NaN output and no gradient, never an out-of-bounds access, so
// the host need not wait for a validation result before launching them.
template <typename T>
VISDET_HOST_DEVICE VISDET_INLINE int roi_flags(const T* roi,
                                               int64_t batch_size,
                                               int columns = kRoIColumns) {
#if defined(__CUDA_ARCH__)
  using ::isfinite;
#else
  using std::isfinite;
#endif
  using A = acc_t<T>;
  int flags = 0;
  for (int j = 0; j < columns; ++j) {
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

// One element (k, c, ph, pw) of a RoI op's [K, C, PH, PW] output and its
// offset index there, for step j of a loop over the output.
template <typename I>
struct PooledElement {
  I index, k, c, ph, pw;
};

// Row-major: j is the offset (the CPU loops, and roi_pool's CUDA kernels on a
// map the L2 holds).
template <typename I>
VISDET_HOST_DEVICE VISDET_INLINE PooledElement<I> row_major_element(
    I j, I channels, I pooled_h, I pooled_w) {
  PooledElement<I> e;
  e.index = j;
  e.pw = j % pooled_w;
  e.ph = (j / pooled_w) % pooled_h;
  e.c = (j / pooled_w / pooled_h) % channels;
  e.k = j / pooled_w / pooled_h / channels;
  return e;
}

// Channel-major: j enumerates [C, K, PH, PW], so the CUDA threads in flight
// work on a few channels of every RoI at a time and touch only those
// channels' input (or grad_input) planes, a few hundred KB that stay in L2
// while every RoI reads (or adds to) them. Walked RoI by RoI, each RoI touches
// all C planes, and a map larger than the L2 streams from DRAM once per
// overlapping RoI (the backward's atomics miss L2 the same way).
template <typename I>
VISDET_HOST_DEVICE VISDET_INLINE PooledElement<I> channel_major_element(
    I j, I num_rois, I channels, I pooled_h, I pooled_w) {
  const I bins = pooled_h * pooled_w;
  const I bin = j % bins;
  const I plane = j / bins;  // c * K + k
  PooledElement<I> e;
  e.k = plane % num_rois;
  e.c = plane / num_rois;
  e.ph = bin / pooled_w;
  e.pw = bin - e.ph * pooled_w;
  e.index = (e.k * channels + e.c) * bins + bin;
  return e;
}

// Either walk, chosen per launch.
template <typename I>
VISDET_HOST_DEVICE VISDET_INLINE PooledElement<I> pooled_element(
    I j, bool channel_major, I num_rois, I channels, I pooled_h, I pooled_w) {
  return channel_major
             ? channel_major_element<I>(j, num_rois, channels, pooled_h,
                                        pooled_w)
             : row_major_element<I>(j, channels, pooled_h, pooled_w);
}

}  // namespace visdet_ops
