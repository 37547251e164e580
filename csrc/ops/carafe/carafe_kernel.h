// CARAFE (content-aware reassembly of features, mmcv.ops.carafe /
// carafe_naive) math shared by the CPU loops and the CUDA kernels.
// Torch-free.
//
// features [N, C, H, W], masks [N, G*K*K, H*S, W*S], output [N, C, H*S, W*S]:
//   out[n, c, ph, pw] = sum_{iy, ix < K} features[n, c, ph/S + iy - r, pw/S + ix - r]
//                                        * masks[n, (g*K + iy)*K + ix, ph, pw]
// with r = (K - 1) / 2, g = c / (C / G) (contiguous channel groups) and
// features outside the map counting as 0. Every function below is a gather
// over one element of its output: no atomics, deterministic.
#pragma once

#include <cstdint>

#include "common/macros.h"

namespace visdet_ops {
namespace carafe_detail {

struct Shape {
  int64_t batch, channels, height, width;
  int64_t kernel, groups, scale;
  VISDET_HOST_DEVICE int64_t out_h() const { return height * scale; }
  VISDET_HOST_DEVICE int64_t out_w() const { return width * scale; }
  VISDET_HOST_DEVICE int64_t mask_channels() const {
    return groups * kernel * kernel;
  }
  VISDET_HOST_DEVICE int64_t output_numel() const {
    return batch * channels * out_h() * out_w();
  }
  VISDET_HOST_DEVICE int64_t features_numel() const {
    return batch * channels * height * width;
  }
  VISDET_HOST_DEVICE int64_t masks_numel() const {
    return batch * mask_channels() * out_h() * out_w();
  }
};

// Output element e of [N, C, HS, WS]. load(T) -> A converts storage to the
// compute type.
template <typename A, typename T, typename Load>
VISDET_HOST_DEVICE VISDET_INLINE A forward_element(int64_t e, const T* features,
                                                   const T* masks,
                                                   const Shape& s, Load load) {
  const int64_t Wo = s.out_w(), Ho = s.out_h(), K = s.kernel;
  const int64_t pw = e % Wo;
  const int64_t ph = (e / Wo) % Ho;
  const int64_t c = (e / Wo / Ho) % s.channels;
  const int64_t n = e / Wo / Ho / s.channels;
  const int64_t g = c / (s.channels / s.groups);
  const int64_t r = (K - 1) / 2;
  const int64_t h = ph / s.scale, w = pw / s.scale;
  const T* plane = features + (n * s.channels + c) * s.height * s.width;
  const T* mask = masks + ((n * s.mask_channels() + g * K * K) * Ho + ph) * Wo + pw;
  const int64_t mask_stride = Ho * Wo;
  A acc = A(0);
  for (int64_t iy = 0; iy < K; ++iy) {
    const int64_t y = h + iy - r;
    if (y < 0 || y >= s.height) continue;
    for (int64_t ix = 0; ix < K; ++ix) {
      const int64_t x = w + ix - r;
      if (x < 0 || x >= s.width) continue;
      acc += load(plane[y * s.width + x]) * load(mask[(iy * K + ix) * mask_stride]);
    }
  }
  return acc;
}

// Gradient of features element e of [N, C, H, W]: every output whose window
// covers it, i.e. the S x S outputs of each low-resolution position
// (y - iy + r, x - ix + r).
template <typename A, typename T, typename Load>
VISDET_HOST_DEVICE VISDET_INLINE A grad_features_element(int64_t e,
                                                         const T* grad_output,
                                                         const T* masks,
                                                         const Shape& s,
                                                         Load load) {
  const int64_t Wo = s.out_w(), Ho = s.out_h(), K = s.kernel, S = s.scale;
  const int64_t x = e % s.width;
  const int64_t y = (e / s.width) % s.height;
  const int64_t c = (e / s.width / s.height) % s.channels;
  const int64_t n = e / s.width / s.height / s.channels;
  const int64_t g = c / (s.channels / s.groups);
  const int64_t r = (K - 1) / 2;
  const T* grad = grad_output + (n * s.channels + c) * Ho * Wo;
  const T* mask_base = masks + (n * s.mask_channels() + g * K * K) * Ho * Wo;
  A acc = A(0);
  for (int64_t iy = 0; iy < K; ++iy) {
    const int64_t h = y - iy + r;
    if (h < 0 || h >= s.height) continue;
    for (int64_t ix = 0; ix < K; ++ix) {
      const int64_t w = x - ix + r;
      if (w < 0 || w >= s.width) continue;
      const T* mask = mask_base + (iy * K + ix) * Ho * Wo;
      for (int64_t a = 0; a < S; ++a) {
        const int64_t row = (h * S + a) * Wo + w * S;
        for (int64_t b = 0; b < S; ++b) {
          acc += load(grad[row + b]) * load(mask[row + b]);
        }
      }
    }
  }
  return acc;
}

// Gradient of masks element e of [N, G*K*K, HS, WS]: the channels of its group.
template <typename A, typename T, typename Load>
VISDET_HOST_DEVICE VISDET_INLINE A grad_masks_element(int64_t e,
                                                      const T* grad_output,
                                                      const T* features,
                                                      const Shape& s,
                                                      Load load) {
  const int64_t Wo = s.out_w(), Ho = s.out_h(), K = s.kernel;
  const int64_t pw = e % Wo;
  const int64_t ph = (e / Wo) % Ho;
  const int64_t m = (e / Wo / Ho) % s.mask_channels();
  const int64_t n = e / Wo / Ho / s.mask_channels();
  const int64_t g = m / (K * K);
  const int64_t j = m - g * K * K;
  const int64_t r = (K - 1) / 2;
  const int64_t y = ph / s.scale + j / K - r;
  const int64_t x = pw / s.scale + j % K - r;
  if (y < 0 || y >= s.height || x < 0 || x >= s.width) return A(0);
  const int64_t cpg = s.channels / s.groups;
  const int64_t hw = s.height * s.width, ohw = Ho * Wo;
  const T* f = features + (n * s.channels + g * cpg) * hw + y * s.width + x;
  const T* go = grad_output + (n * s.channels + g * cpg) * ohw + ph * Wo + pw;
  A acc = A(0);
  for (int64_t c = 0; c < cpg; ++c) acc += load(f[c * hw]) * load(go[c * ohw]);
  return acc;
}

}  // namespace carafe_detail
}  // namespace visdet_ops
