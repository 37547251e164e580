// Multi-scale deformable attention math (mmcv's ms_deform_attn semantics),
// shared by the CPU loops and the CUDA kernels. Torch-free.
//
// A sampling location (x, y) in [0, 1] maps to the pixel coordinate
// (x * W - 0.5, y * H - 0.5) of its level (grid_sample, align_corners=False).
// A sample counts only when that coordinate lies in (-1, W) x (-1, H); it is
// then bilinearly interpolated with zero padding: corners outside the map
// read 0 (and receive no gradient).
#pragma once

#include <cmath>
#include <cstdint>

#include "common/macros.h"

namespace visdet_ops {
namespace msda_detail {

// The four bilinear corners of one sample, in mmcv's order:
// (low, low), (low, high), (high, low), (high, high) as (y, x).
template <typename T, typename I>
struct Corners {
  I key[4];      // key index within the level: y * width + x
  T weight[4];   // bilinear weights
  bool valid[4]; // corner inside the map
  T lh, lw, hh, hw;
};

// Returns false when the sample lies outside (-1, H) x (-1, W) (or is NaN):
// it contributes nothing and gets zero gradients.
template <typename T, typename I>
VISDET_HOST_DEVICE VISDET_INLINE bool sample_corners(T loc_x, T loc_y,
                                                     I height, I width,
                                                     Corners<T, I>* c) {
  const T h_im = loc_y * static_cast<T>(height) - T(0.5);
  const T w_im = loc_x * static_cast<T>(width) - T(0.5);
  if (!(h_im > T(-1) && w_im > T(-1) && h_im < static_cast<T>(height) &&
        w_im < static_cast<T>(width))) {
    return false;
  }
  const T h_floor = floor(h_im);
  const T w_floor = floor(w_im);
  const I h_low = static_cast<I>(h_floor);
  const I w_low = static_cast<I>(w_floor);
  const I h_high = h_low + 1;
  const I w_high = w_low + 1;
  c->lh = h_im - h_floor;
  c->lw = w_im - w_floor;
  c->hh = T(1) - c->lh;
  c->hw = T(1) - c->lw;
  c->weight[0] = c->hh * c->hw;
  c->weight[1] = c->hh * c->lw;
  c->weight[2] = c->lh * c->hw;
  c->weight[3] = c->lh * c->lw;
  c->valid[0] = h_low >= 0 && w_low >= 0;
  c->valid[1] = h_low >= 0 && w_high <= width - 1;
  c->valid[2] = h_high <= height - 1 && w_low >= 0;
  c->valid[3] = h_high <= height - 1 && w_high <= width - 1;
  c->key[0] = h_low * width + w_low;
  c->key[1] = h_low * width + w_high;
  c->key[2] = h_high * width + w_low;
  c->key[3] = h_high * width + w_high;
  return true;
}

// Bilinear value from the four corner values (0 for invalid corners), in
// mmcv's summation order.
template <typename T, typename I>
VISDET_HOST_DEVICE VISDET_INLINE T bilinear(const Corners<T, I>& c, T v1, T v2,
                                            T v3, T v4) {
  return c.weight[0] * v1 + c.weight[1] * v2 + c.weight[2] * v3 +
         c.weight[3] * v4;
}

// d(bilinear)/d(h_im) and d(bilinear)/d(w_im), from the same corner values.
template <typename T, typename I>
VISDET_HOST_DEVICE VISDET_INLINE T grad_h_weight(const Corners<T, I>& c, T v1,
                                                 T v2, T v3, T v4) {
  return -c.hw * v1 - c.lw * v2 + c.hw * v3 + c.lw * v4;
}
template <typename T, typename I>
VISDET_HOST_DEVICE VISDET_INLINE T grad_w_weight(const Corners<T, I>& c, T v1,
                                                 T v2, T v3, T v4) {
  return -c.hh * v1 + c.hh * v2 - c.lh * v3 + c.lh * v4;
}

}  // namespace msda_detail
}  // namespace visdet_ops
