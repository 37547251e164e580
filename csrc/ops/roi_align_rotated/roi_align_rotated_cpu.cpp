#include <algorithm>
#include <vector>

#include "roi_align_rotated_kernel.h"
#include "roi_align_rotated_launch.h"

namespace visdet_ops {
namespace {

using roi_align_rotated_detail::RotatedGeometry;
using roi_align_rotated_detail::Sample;

// Most samples of a RoI kept in a table (4 MiB in float64); a RoI with more
// (a huge sampling_ratio or adaptive grid) computes each sample where it is
// used, once per block of channels.
constexpr int64_t kMaxTableSamples = int64_t{1} << 16;

// The samples of one RoI, computed once and read by every channel (mmcv's CPU
// kernel does the same): entry b * per_bin + j is sample j of bin b.
template <typename A>
struct RoISamples {
  RotatedGeometry<A> g;
  int per_bin = 0;
  int64_t pooled_w = 1, height = 0, width = 0;
  bool tabled = false;
  std::vector<Sample<A, int64_t>> table;

  template <typename T>
  void compute(const acc_t<T>* roi, const RoIAlignRotatedShape& s,
               A spatial_scale) {
    g = roi_align_rotated_detail::rotated_geometry(
        roi, spatial_scale, s.pooled_h, s.pooled_w, s.sampling_ratio,
        s.aligned, s.clockwise, s.height, s.width);
    per_bin = g.grid_h * g.grid_w;
    pooled_w = s.pooled_w;
    height = s.height;
    width = s.width;
    const int64_t bins = s.pooled_h * s.pooled_w;
    tabled = bins * per_bin <= kMaxTableSamples;
    if (!tabled) return;
    table.resize(static_cast<size_t>(bins * per_bin));
    for (int64_t b = 0; b < bins; ++b) {
      for (int j = 0; j < per_bin; ++j) {
        table[static_cast<size_t>(b * per_bin + j)] = make(b, j);
      }
    }
  }

  Sample<A, int64_t> make(int64_t b, int j) const {
    return roi_align_rotated_detail::rotated_sample<A, int64_t>(
        g, pooled_w, height, width, b, j);
  }

  Sample<A, int64_t> at(int64_t b, int j) const {
    return tabled ? table[static_cast<size_t>(b * per_bin + j)] : make(b, j);
  }
};

// Channels computed together: each sample is read once for all the block's
// planes, at the same offsets.
constexpr int kChannelBlock = 8;

}  // namespace

template <typename T>
void roi_align_rotated_forward_cpu(const T* input, const acc_t<T>* rois,
                                   const RoIAlignRotatedShape& s,
                                   acc_t<T> spatial_scale, int64_t begin,
                                   int64_t end, T* output) {
  using A = acc_t<T>;
  const int64_t bins = s.pooled_h * s.pooled_w;
  const int64_t plane_in = s.height * s.width;
  RoISamples<A> r;
  for (int64_t plane = begin; plane < end;) {
    const int64_t k = plane / s.channels;
    const int64_t c_end = std::min(end, (k + 1) * s.channels);
    const acc_t<T>* roi = rois + k * kRotatedRoIColumns;
    if (roi_flags(roi, s.batch_size, kRotatedRoIColumns) != 0) {
      // An invalid RoI gives NaN and reads no input.
      for (int64_t i = plane * bins; i < c_end * bins; ++i) {
        output[i] = from_acc<T>(quiet_nan<A>());
      }
      plane = c_end;
      continue;
    }
    r.template compute<T>(roi, s, spatial_scale);
    const A count = static_cast<A>(max_of(r.per_bin, 1));
    while (plane < c_end) {
      const int n =
          static_cast<int>(std::min<int64_t>(kChannelBlock, c_end - plane));
      const T* planes[kChannelBlock];
      for (int i = 0; i < n; ++i) {
        const int64_t c = (plane + i) % s.channels;
        planes[i] = input + (r.g.batch * s.channels + c) * plane_in;
      }
      T* out = output + plane * bins;
      for (int64_t b = 0; b < bins; ++b) {
        A sum[kChannelBlock];
        for (int i = 0; i < n; ++i) sum[i] = A(0);
        for (int j = 0; j < r.per_bin; ++j) {
          const Sample<A, int64_t> smp = r.at(b, j);
          if (!smp.valid()) continue;
          for (int i = 0; i < n; ++i) {
            sum[i] += roi_align_rotated_detail::sample_value(planes[i],
                                                             s.width, smp);
          }
        }
        for (int i = 0; i < n; ++i) out[i * bins + b] = from_acc<T>(sum[i] / count);
      }
      plane += n;
    }
  }
}

template <typename T>
void roi_align_rotated_backward_cpu(const T* grad_output, const acc_t<T>* rois,
                                    const RoIAlignRotatedShape& s,
                                    acc_t<T> spatial_scale, int64_t c_begin,
                                    int64_t c_end, acc_t<T>* grad_input) {
  using A = acc_t<T>;
  const int64_t bins = s.pooled_h * s.pooled_w;
  RoISamples<A> r;
  for (int64_t k = 0; k < s.num_rois; ++k) {
    const acc_t<T>* roi = rois + k * kRotatedRoIColumns;
    if (roi_flags(roi, s.batch_size, kRotatedRoIColumns) != 0) continue;
    r.template compute<T>(roi, s, spatial_scale);
    if (r.per_bin == 0) continue;
    const A count = static_cast<A>(r.per_bin);
    for (int64_t c = c_begin; c < c_end; ++c) {
      A* gi = grad_input + (r.g.batch * s.channels + c) * s.height * s.width;
      auto add = [gi, &s](int64_t y, int64_t x, A value) {
        gi[y * s.width + x] += value;
      };
      const T* go = grad_output + (k * s.channels + c) * bins;
      for (int64_t b = 0; b < bins; ++b) {
        const A share = to_acc(go[b]) / count;
        for (int j = 0; j < r.per_bin; ++j) {
          const Sample<A, int64_t> smp = r.at(b, j);
          if (smp.valid()) {
            roi_align_rotated_detail::scatter_sample(smp, share, add);
          }
        }
      }
    }
  }
}

#define VISDET_INSTANTIATE(T)                                             \
  template void roi_align_rotated_forward_cpu<T>(                         \
      const T*, const acc_t<T>*, const RoIAlignRotatedShape&, acc_t<T>,   \
      int64_t, int64_t, T*);                                              \
  template void roi_align_rotated_backward_cpu<T>(                        \
      const T*, const acc_t<T>*, const RoIAlignRotatedShape&, acc_t<T>,   \
      int64_t, int64_t, acc_t<T>*);
VISDET_FOR_HOST_FLOATING_TYPES(VISDET_INSTANTIATE)
#undef VISDET_INSTANTIATE

}  // namespace visdet_ops
