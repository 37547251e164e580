#include <algorithm>
#include <vector>

#include "roi_align_kernel.h"
#include "roi_align_launch.h"

namespace visdet_ops {
namespace {

using roi_align_detail::AxisWeights;
using roi_align_detail::RoIGeometry;

// One axis of every sample of a RoI: entry p * grid + i is sample i of bin p.
// A sample's bilinear weights are separable (w1 = hy * hx, ...), so the CPU
// computes each axis once per RoI and reuses it for every channel and every
// bin of the other axis, as torchvision's CPU kernel reuses its table (which
// holds the whole bins x samples grid; two axes need no memory bound).
template <typename A>
struct AxisSample {
  A coord;  // the sample's coordinate (what max mode records as its argmax)
  bool valid;
  AxisWeights<A, int64_t> w;
};

template <typename A>
void axis_samples(A start, A bin, int64_t pooled, int grid, int64_t size,
                  std::vector<AxisSample<A>>* out) {
  out->resize(static_cast<size_t>(pooled * grid));
  for (int64_t p = 0; p < pooled; ++p) {
    for (int i = 0; i < grid; ++i) {
      AxisSample<A>& a = (*out)[static_cast<size_t>(p * grid + i)];
      a.coord = roi_align_detail::sample_coord(start, p, bin, i, grid);
      a.w = {};  // an outside sample keeps zeros: defined, never read
      a.valid = roi_align_detail::bilinear_axis(size, a.coord, &a.w);
    }
  }
}

// The samples of one RoI, both axes (roi_geometry's grid).
template <typename A>
struct RoISamples {
  RoIGeometry<A> g;
  std::vector<AxisSample<A>> ys, xs;

  template <typename T>
  void compute(const acc_t<T>* roi, const RoIAlignShape& s, A spatial_scale) {
    g = roi_align_detail::roi_geometry(roi, spatial_scale, s.pooled_h,
                                       s.pooled_w, s.sampling_ratio, s.aligned,
                                       s.height, s.width);
    axis_samples(g.start_h, g.bin_h, s.pooled_h, g.grid_h, s.height, &ys);
    axis_samples(g.start_w, g.bin_w, s.pooled_w, g.grid_w, s.width, &xs);
  }
};

// Channels computed together: each sample's weights are formed once and
// applied to every channel of the block (torchvision's CPU kernel reuses a
// table of them instead), and the block's planes are read at the same offsets.
constexpr int kChannelBlock = 8;

// roi_align_forward_element for every bin of `n` (<= kChannelBlock) planes of
// one RoI, with the same arithmetic in the same order per channel (so the
// same bits). out/argmax_*: the first plane's outputs; planes follow at
// plane_out strides.
template <typename T>
void forward_planes(const T* const* planes, int n,
                    const RoISamples<acc_t<T>>& r, const RoIAlignShape& s,
                    T* out, acc_t<T>* argmax_y, acc_t<T>* argmax_x) {
  using A = acc_t<T>;
  const int gh = r.g.grid_h, gw = r.g.grid_w;
  const int count = max_of(gh * gw, 1);
  const bool empty = gh == 0 || gw == 0;
  const int64_t plane_out = s.pooled_h * s.pooled_w;
  int64_t index = 0;
  for (int64_t ph = 0; ph < s.pooled_h; ++ph) {
    const AxisSample<A>* ys = r.ys.data() + ph * gh;
    for (int64_t pw = 0; pw < s.pooled_w; ++pw, ++index) {
      const AxisSample<A>* xs = r.xs.data() + pw * gw;
      if (s.pool_mode == roi_align_detail::kMax) {
        A best[kChannelBlock], best_y[kChannelBlock], best_x[kChannelBlock];
        for (int j = 0; j < n; ++j) {
          best[j] = lowest_value<A>();
          best_y[j] = best_x[j] = A(-1);
        }
        for (int iy = 0; iy < gh; ++iy) {
          for (int ix = 0; ix < gw; ++ix) {
            const bool valid = ys[iy].valid && xs[ix].valid;
            const auto b =
                roi_align_detail::bilinear_corners(ys[iy].w, xs[ix].w);
            for (int j = 0; j < n; ++j) {
              // An outside sample counts 0 (its weights are zeros, unread).
              const A val =
                  valid ? roi_align_detail::bilinear_value(planes[j], s.width, b)
                        : A(0);
              if (val > best[j]) {
                best[j] = val;
                best_y[j] = ys[iy].coord;
                best_x[j] = xs[ix].coord;
              }
            }
          }
        }
        for (int j = 0; j < n; ++j) {
          out[j * plane_out + index] = from_acc<T>(empty ? A(0) : best[j]);
          argmax_y[j * plane_out + index] = best_y[j];
          argmax_x[j * plane_out + index] = best_x[j];
        }
      } else {
        A sum[kChannelBlock];
        for (int j = 0; j < n; ++j) sum[j] = A(0);
        for (int iy = 0; iy < gh; ++iy) {
          if (!ys[iy].valid) continue;
          for (int ix = 0; ix < gw; ++ix) {
            if (!xs[ix].valid) continue;
            const auto b =
                roi_align_detail::bilinear_corners(ys[iy].w, xs[ix].w);
            for (int j = 0; j < n; ++j) {
              sum[j] += roi_align_detail::bilinear_value(planes[j], s.width, b);
            }
          }
        }
        for (int j = 0; j < n; ++j) {
          out[j * plane_out + index] = from_acc<T>(sum[j] / static_cast<A>(count));
        }
      }
    }
  }
}

}  // namespace

// Planes [begin, end) of the [K * C] (RoI, channel) planes: the samples of a
// RoI are computed once per range, then every channel reads through them.
template <typename T>
void roi_align_forward_cpu(const T* input, const acc_t<T>* rois,
                           const RoIAlignShape& s, acc_t<T> spatial_scale,
                           int64_t begin, int64_t end, T* output,
                           acc_t<T>* argmax_y, acc_t<T>* argmax_x) {
  using A = acc_t<T>;
  const int64_t plane_out = s.pooled_h * s.pooled_w;
  const int64_t plane_in = s.height * s.width;
  const bool is_max = s.pool_mode == roi_align_detail::kMax;
  RoISamples<A> r;
  for (int64_t plane = begin; plane < end;) {
    const int64_t k = plane / s.channels;
    const int64_t c_end = std::min(end, (k + 1) * s.channels);
    const acc_t<T>* roi = rois + k * 5;
    if (roi_flags(roi, s.batch_size) != 0) {
      // An invalid RoI gives NaN and argmax -1, and reads no input.
      for (int64_t i = plane * plane_out; i < c_end * plane_out; ++i) {
        output[i] = from_acc<T>(quiet_nan<A>());
        if (is_max) argmax_y[i] = argmax_x[i] = A(-1);
      }
      plane = c_end;
      continue;
    }
    r.template compute<T>(roi, s, spatial_scale);
    while (plane < c_end) {
      const int n = static_cast<int>(
          std::min<int64_t>(kChannelBlock, c_end - plane));
      const T* planes[kChannelBlock];
      for (int j = 0; j < n; ++j) {
        const int64_t c = (plane + j) % s.channels;
        planes[j] = input + (r.g.batch * s.channels + c) * plane_in;
      }
      const int64_t first = plane * plane_out;
      forward_planes<T>(planes, n, r, s, output + first,
                        is_max ? argmax_y + first : nullptr,
                        is_max ? argmax_x + first : nullptr);
      plane += n;
    }
  }
}

template <typename T>
void roi_align_backward_cpu(const T* grad_output, const acc_t<T>* rois,
                            const acc_t<T>* argmax_y, const acc_t<T>* argmax_x,
                            const RoIAlignShape& s, acc_t<T> spatial_scale,
                            int64_t c_begin, int64_t c_end,
                            acc_t<T>* grad_input) {
  using A = acc_t<T>;
  const int64_t plane = s.pooled_h * s.pooled_w;
  if (s.pool_mode == roi_align_detail::kMax) {
    // One scatter per output element, at its recorded sample.
    for (int64_t k = 0; k < s.num_rois; ++k) {
      const acc_t<T>* roi = rois + k * 5;
      if (roi_flags(roi, s.batch_size) != 0) continue;
      const auto batch = static_cast<int64_t>(roi[0]);
      for (int64_t c = c_begin; c < c_end; ++c) {
        A* gi = grad_input + (batch * s.channels + c) * s.height * s.width;
        auto add = [gi, &s](int64_t y, int64_t x, A value) {
          gi[y * s.width + x] += value;
        };
        const int64_t first = (k * s.channels + c) * plane;
        for (int64_t index = first; index < first + plane; ++index) {
          roi_align_detail::roi_align_backward_max_bin<A, int64_t>(
              s.height, s.width, argmax_y[index], argmax_x[index],
              to_acc(grad_output[index]), add);
        }
      }
    }
    return;
  }
  auto add = [grad_input](int64_t offset, A value) {
    grad_input[offset] += value;
  };
  // Average mode: roi_align_backward_avg_bin's scatter, with the RoI's
  // samples computed once for the channel range (same order, same bits).
  RoISamples<A> r;
  for (int64_t k = 0; k < s.num_rois; ++k) {
    const acc_t<T>* roi = rois + k * 5;
    if (roi_flags(roi, s.batch_size) != 0) continue;
    r.template compute<T>(roi, s, spatial_scale);
    const int gh = r.g.grid_h, gw = r.g.grid_w;
    const int count = max_of(gh * gw, 1);
    for (int64_t c = c_begin; c < c_end; ++c) {
      const int64_t plane_offset =
          (r.g.batch * s.channels + c) * s.height * s.width;
      const T* go = grad_output + (k * s.channels + c) * plane;
      int64_t index = 0;
      for (int64_t ph = 0; ph < s.pooled_h; ++ph) {
        const AxisSample<A>* ys = r.ys.data() + ph * gh;
        for (int64_t pw = 0; pw < s.pooled_w; ++pw, ++index) {
          const AxisSample<A>* xs = r.xs.data() + pw * gw;
          const A share = to_acc(go[index]) / static_cast<A>(count);
          for (int iy = 0; iy < gh; ++iy) {
            if (!ys[iy].valid) continue;
            for (int ix = 0; ix < gw; ++ix) {
              if (!xs[ix].valid) continue;
              const auto b = roi_align_detail::bilinear_corners(ys[iy].w,
                                                                xs[ix].w);
              add(plane_offset + b.y_low * s.width + b.x_low, share * b.w1);
              add(plane_offset + b.y_low * s.width + b.x_high, share * b.w2);
              add(plane_offset + b.y_high * s.width + b.x_low, share * b.w3);
              add(plane_offset + b.y_high * s.width + b.x_high, share * b.w4);
            }
          }
        }
      }
    }
  }
}

#define VISDET_INSTANTIATE(T)                                                \
  template void roi_align_forward_cpu<T>(                                    \
      const T*, const acc_t<T>*, const RoIAlignShape&, acc_t<T>, int64_t,    \
      int64_t, T*, acc_t<T>*, acc_t<T>*);                                    \
  template void roi_align_backward_cpu<T>(                                   \
      const T*, const acc_t<T>*, const acc_t<T>*, const acc_t<T>*,           \
      const RoIAlignShape&, acc_t<T>, int64_t, int64_t, acc_t<T>*);
VISDET_FOR_HOST_FLOATING_TYPES(VISDET_INSTANTIATE)
#undef VISDET_INSTANTIATE

}  // namespace visdet_ops
