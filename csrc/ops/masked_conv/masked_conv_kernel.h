// masked_conv2d (mmcv.ops.masked_conv2d) gathers and scatters shared by the
// CPU loops and the CUDA kernels. Torch-free.
//
// The convolution is computed only at the P active output positions
// idx[p] = (n, h, w): im2col gathers their input windows into cols [P, K]
// (K = C * KH * KW, column order (c, i, j) as weight.view(C_out, K)), one GEMM
// gives [P, C_out], and col2im writes those rows into the zeroed output.
#pragma once

#include <cstdint>

#include "common/macros.h"

namespace visdet_ops {
namespace masked_conv_detail {

struct Geometry {
  int64_t channels, height, width;  // of the gathered map
  int64_t kh, kw, pad_h, pad_w;
  int64_t map_h, map_w;             // of the active-position map
};

// cols[p, k] for element e = p * K + k of cols.
template <typename T, typename C, typename Load, typename Cast>
VISDET_HOST_DEVICE VISDET_INLINE C im2col_element(int64_t e, const T* input,
                                                  const int64_t* idx,
                                                  const Geometry& g, Load load,
                                                  Cast cast) {
  const int64_t kk = g.kh * g.kw;
  const int64_t K = g.channels * kk;
  const int64_t p = e / K;
  const int64_t k = e - p * K;
  const int64_t c = k / kk;
  const int64_t i = (k - c * kk) / g.kw;
  const int64_t j = k - c * kk - i * g.kw;
  const int64_t n = idx[3 * p], h = idx[3 * p + 1], w = idx[3 * p + 2];
  const int64_t y = h - g.pad_h + i;
  const int64_t x = w - g.pad_w + j;
  if (y < 0 || y >= g.height || x < 0 || x >= g.width) return cast(0);
  return load(input[((n * g.channels + c) * g.height + y) * g.width + x]);
}

// Gradient of the input element e of [N, C, H, W]: the sum of the columns of
// every active position whose window covers it (pos_map[n, h, w] is the
// position's row p in cols, or -1). A gather: deterministic, no atomics.
template <typename C>
VISDET_HOST_DEVICE VISDET_INLINE C grad_input_element(int64_t e,
                                                      const C* grad_cols,
                                                      const int64_t* pos_map,
                                                      const Geometry& g) {
  const int64_t x = e % g.width;
  const int64_t y = (e / g.width) % g.height;
  const int64_t c = (e / g.width / g.height) % g.channels;
  const int64_t n = e / g.width / g.height / g.channels;
  const int64_t kk = g.kh * g.kw;
  const int64_t K = g.channels * kk;
  C acc = C(0);
  for (int64_t i = 0; i < g.kh; ++i) {
    const int64_t h = y + g.pad_h - i;
    if (h < 0 || h >= g.map_h) continue;
    for (int64_t j = 0; j < g.kw; ++j) {
      const int64_t w = x + g.pad_w - j;
      if (w < 0 || w >= g.map_w) continue;
      const int64_t p = pos_map[(n * g.map_h + h) * g.map_w + w];
      if (p >= 0) acc += grad_cols[p * K + c * kk + i * g.kw + j];
    }
  }
  return acc;
}

}  // namespace masked_conv_detail
}  // namespace visdet_ops
