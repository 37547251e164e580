#include <algorithm>
#include <vector>

#include "roi_pool_kernel.h"
#include "roi_pool_launch.h"

namespace visdet_ops {

namespace {

// roi_pool_forward_element for every bin of one plane of a valid, non-empty
// RoI, in the same order (the same results). One channel at a time: each
// bin's scan is a tight loop over contiguous rows with the running maximum in
// registers (a block of channels per scan was slower on some CPUs).
template <typename T>
void forward_plane(const T* plane, const int64_t* h_range,
                   const int64_t* w_range, const RoIPoolShape& s, T* out,
                   int32_t* argmax) {
  using A = acc_t<T>;
  int64_t index = 0;
  for (int64_t ph = 0; ph < s.pooled_h; ++ph) {
    const int64_t h_start = h_range[2 * ph], h_end = h_range[2 * ph + 1];
    for (int64_t pw = 0; pw < s.pooled_w; ++pw, ++index) {
      const int64_t w_start = w_range[2 * pw], w_end = w_range[2 * pw + 1];
      const bool empty = h_end <= h_start || w_end <= w_start;
      A best = empty ? A(0) : lowest_value<A>();
      int32_t best_index = -1;
      for (int64_t h = h_start; h < h_end; ++h) {
        const T* row = plane + h * s.width;
        for (int64_t w = w_start; w < w_end; ++w) {
          const A v = to_acc(row[w]);
          if (v > best) {
            best = v;
            best_index = static_cast<int32_t>(h * s.width + w);
          }
        }
      }
      out[index] = from_acc<T>(best);
      argmax[index] = best_index;
    }
  }
}

}  // namespace

// Planes [begin, end) of the [K * C] (RoI, channel) planes: each RoI's bins
// are found once per range, then every channel is scanned through them.
template <typename T>
void roi_pool_forward_cpu(const T* input, const acc_t<T>* rois,
                          const RoIPoolShape& s, acc_t<T> spatial_scale,
                          int64_t begin, int64_t end, T* output,
                          int32_t* argmax) {
  using A = acc_t<T>;
  using namespace roi_pool_detail;
  const int64_t plane_out = s.pooled_h * s.pooled_w;
  const int64_t plane_in = s.height * s.width;
  std::vector<int64_t> h_range(2 * s.pooled_h), w_range(2 * s.pooled_w);
  for (int64_t plane = begin; plane < end;) {
    const int64_t k = plane / s.channels;
    const int64_t c_end = std::min(end, (k + 1) * s.channels);
    const A* roi = rois + k * 5;
    const bool invalid = roi_flags(roi, s.batch_size) != 0;
    const RoIPoolGeometry<A> g =
        roi_pool_geometry(roi, spatial_scale, s.pooled_h, s.pooled_w);
    if (invalid || g.empty_roi) {
      // An invalid RoI gives NaN and reads no input; an empty one gives 0.
      const A value = invalid ? quiet_nan<A>() : A(0);
      for (int64_t i = plane * plane_out; i < c_end * plane_out; ++i) {
        output[i] = from_acc<T>(value);
        argmax[i] = -1;
      }
      plane = c_end;
      continue;
    }
    for (int64_t ph = 0; ph < s.pooled_h; ++ph) {
      h_range[2 * ph] = bin_start(g.y1, g.bin_h, ph, s.height);
      h_range[2 * ph + 1] = bin_end(g.y1, g.bin_h, ph, s.height);
    }
    for (int64_t pw = 0; pw < s.pooled_w; ++pw) {
      w_range[2 * pw] = bin_start(g.x1, g.bin_w, pw, s.width);
      w_range[2 * pw + 1] = bin_end(g.x1, g.bin_w, pw, s.width);
    }
    const int64_t batch = static_cast<int64_t>(to_acc(roi[0]));
    for (; plane < c_end; ++plane) {
      const int64_t c = plane % s.channels;
      forward_plane<T>(input + (batch * s.channels + c) * plane_in,
                       h_range.data(), w_range.data(), s,
                       output + plane * plane_out, argmax + plane * plane_out);
    }
  }
}

// roi_pool_backward_element for channels [c_begin, c_end) of every RoI, with
// the RoI's checks made once per RoI instead of once per element (the same
// additions in the same order).
template <typename T>
void roi_pool_backward_cpu(const T* grad_output, const acc_t<T>* rois,
                           const int32_t* argmax, const RoIPoolShape& s,
                           int64_t c_begin, int64_t c_end,
                           acc_t<T>* grad_input) {
  const int64_t plane = s.pooled_h * s.pooled_w;
  const int64_t plane_in = s.height * s.width;
  for (int64_t k = 0; k < s.num_rois; ++k) {
    const acc_t<T>* roi = rois + k * 5;
    if (roi_flags(roi, s.batch_size) != 0) continue;
    const int64_t batch = static_cast<int64_t>(to_acc(roi[0]));
    for (int64_t c = c_begin; c < c_end; ++c) {
      const int64_t first = (k * s.channels + c) * plane;
      acc_t<T>* grad = grad_input + (batch * s.channels + c) * plane_in;
      for (int64_t index = first; index < first + plane; ++index) {
        const int32_t chosen = argmax[index];
        if (chosen < 0 || static_cast<int64_t>(chosen) >= plane_in) continue;
        grad[chosen] += to_acc(grad_output[index]);
      }
    }
  }
}

#define VISDET_INSTANTIATE(T)                                                \
  template void roi_pool_forward_cpu<T>(const T*, const acc_t<T>*,           \
                                        const RoIPoolShape&, acc_t<T>,       \
                                        int64_t, int64_t, T*, int32_t*);     \
  template void roi_pool_backward_cpu<T>(const T*, const acc_t<T>*,          \
                                         const int32_t*, const RoIPoolShape&, \
                                         int64_t, int64_t, acc_t<T>*);
VISDET_FOR_HOST_FLOATING_TYPES(VISDET_INSTANTIATE)
#undef VISDET_INSTANTIATE

}  // namespace visdet_ops
