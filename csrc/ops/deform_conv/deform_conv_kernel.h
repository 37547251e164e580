// Deformable convolution math (mmcv semantics) shared by the CPU loops and the
// CUDA kernels. Torch-free: pointers and sizes only.
//
// Sample position of kernel point (i, j) for output pixel (oh, ow):
//   y = oh * stride_h - pad_h + i * dilation_h + offset[2 * (i * KW + j)]
//   x = ow * stride_w - pad_w + j * dilation_w + offset[2 * (i * KW + j) + 1]
// (offset channels of deform group g start at g * 2 * KH * KW: (y, x) pairs
// per kernel point, the layout of mmcv and torchvision). The value is the
// bilinear interpolation of the four neighbouring pixels, a neighbour outside
// the map counting as 0, and 0 altogether unless -1 < y < H and -1 < x < W;
// DCNv2 multiplies it by mask[i * KW + j].
#pragma once

#include <cmath>
#include <cstdint>

#include "common/macros.h"
#include "deform_conv_launch.h"

namespace visdet_ops {
namespace deform_conv_detail {

// Where one sample reads: position, modulation and the indices it needs.
// A is the computation type.
template <typename A>
struct Sample {
  int64_t b, group, point, pixel;  // image (in chunk), deform group, k, oh*OW+ow
  int64_t column;                  // b * OH * OW + pixel
  int64_t offset_index;            // of the y offset; x is one plane further
  int64_t mask_index;
  A y, x, m;
};

// Bilinear corners of (y, x); `inside` false means the sample is 0.
template <typename A>
struct Corners {
  bool inside;
  int64_t y0, x0;
  A ly, lx;                   // fractional parts
  bool v00, v01, v10, v11;    // corner inside the map
};

// `sample` in [0, s.samples()): ordered (group, point, b, pixel) so that
// neighbouring threads write neighbouring columns. Load converts storage T to
// A.
template <typename A, typename T, typename Load>
VISDET_HOST_DEVICE VISDET_INLINE Sample<A> locate(int64_t sample,
                                                  const T* offset,
                                                  const T* mask,
                                                  const DeformConvShape& s,
                                                  Load load) {
  Sample<A> r;
  const int64_t plane = s.out_plane();
  const int64_t width = s.columns_width();
  const int64_t kk = s.kernel_points();
  r.column = sample % width;
  const int64_t rest = sample / width;
  r.point = rest % kk;
  r.group = rest / kk;
  r.b = r.column / plane;
  r.pixel = r.column - r.b * plane;
  const int64_t oh = r.pixel / s.out_w;
  const int64_t ow = r.pixel - oh * s.out_w;
  const int64_t i = r.point / s.kernel_w;
  const int64_t j = r.point - i * s.kernel_w;
  const int64_t bg = r.b * s.deform_groups + r.group;
  r.offset_index = ((bg * kk + r.point) * 2) * plane + r.pixel;
  r.mask_index = (bg * kk + r.point) * plane + r.pixel;
  r.y = static_cast<A>(oh * s.stride_h - s.pad_h + i * s.dilation_h) +
        load(offset[r.offset_index]);
  r.x = static_cast<A>(ow * s.stride_w - s.pad_w + j * s.dilation_w) +
        load(offset[r.offset_index + plane]);
  r.m = mask != nullptr ? load(mask[r.mask_index]) : A(1);
  return r;
}

template <typename A>
VISDET_HOST_DEVICE VISDET_INLINE Corners<A> corners(A y, A x, int64_t height,
                                                    int64_t width) {
  Corners<A> c;
  // A negated form would accept NaN; this rejects it (and +-inf), and bounds
  // y, x before they are converted to integers.
  c.inside = y > A(-1) && x > A(-1) && y < static_cast<A>(height) &&
             x < static_cast<A>(width);
  if (!c.inside) {
    c.y0 = c.x0 = 0;
    c.ly = c.lx = A(0);
    c.v00 = c.v01 = c.v10 = c.v11 = false;
    return c;
  }
  const A fy = floor(y);
  const A fx = floor(x);
  c.y0 = static_cast<int64_t>(fy);
  c.x0 = static_cast<int64_t>(fx);
  c.ly = y - fy;
  c.lx = x - fx;
  const bool top = c.y0 >= 0, bottom = c.y0 + 1 <= height - 1;
  const bool left = c.x0 >= 0, right = c.x0 + 1 <= width - 1;
  c.v00 = top && left;
  c.v01 = top && right;
  c.v10 = bottom && left;
  c.v11 = bottom && right;
  return c;
}

// Columns of one sample for channels [c_begin, c_end) of its deform group.
// `input` is the chunk's [B, C, H, W].
template <typename A, typename T, typename Load, typename Store>
VISDET_HOST_DEVICE VISDET_INLINE void im2col_sample(
    int64_t sample, int64_t c_begin, int64_t c_end,
    const T* __restrict__ input, const T* __restrict__ offset,
    const T* __restrict__ mask, const DeformConvShape& s,
    T* __restrict__ columns, Load load, Store store) {
  const Sample<A> p = locate<A>(sample, offset, mask, s, load);
  const Corners<A> c = corners(p.y, p.x, s.height, s.width);
  const int64_t hw = s.height * s.width;
  const int64_t channel = p.group * s.channels_per_group() + c_begin;
  int64_t in_index = (p.b * s.channels + channel) * hw + c.y0 * s.width + c.x0;
  const int64_t row_stride = s.kernel_points() * s.columns_width();
  T* col = columns + (channel * s.kernel_points() + p.point) * s.columns_width() +
           p.column;
  const A hy = A(1) - c.ly, hx = A(1) - c.lx;
  const A w00 = hy * hx * p.m, w01 = hy * c.lx * p.m;
  const A w10 = c.ly * hx * p.m, w11 = c.ly * c.lx * p.m;
  // columns never alias input (restrict), so the loads of the next channels
  // can be issued before this channel's store: unrolled on the GPU for
  // memory-level parallelism.
#if defined(__CUDA_ARCH__)
#pragma unroll 4
#endif
  for (int64_t ch = c_begin; ch < c_end; ++ch) {
    A v = A(0);
    if (c.inside) {
      if (c.v00) v += w00 * load(input[in_index]);
      if (c.v01) v += w01 * load(input[in_index + 1]);
      if (c.v10) v += w10 * load(input[in_index + s.width]);
      if (c.v11) v += w11 * load(input[in_index + s.width + 1]);
    }
    *col = store(v);
    in_index += hw;
    col += row_stride;
  }
}

// Backward of one sample for channels [c_begin, c_end): adds into grad_input
// through add_pair(index, a, b, use_a, use_b) (a to grad_input[index] if
// use_a, b to grad_input[index + 1] if use_b: the two corners of one row, so
// a GPU can add both with one vector atomic) and returns the partial sums of
// d/dy, d/dx (of the offset) and d/dmask over those channels. Exact derivative of
// im2col_sample (the fractional parts' derivative is 1; floor's is 0).
//
// `columns` holds grad_columns on entry; each element this sample reads is
// overwritten with the column value im2col_sample would write there (same
// expression, so the same bits). Every element of the column matrix belongs
// to exactly one (sample, channel), so this in-place exchange is race-free and
// the backward needs no second im2col pass for the weight gradient: the
// corners it loads for the input/offset gradients are the ones im2col would
// load again.
template <typename A>
struct SampleGrad {
  A y, x, m;
};

template <typename A, typename T, typename Load, typename Store,
          typename AddPair>
VISDET_HOST_DEVICE VISDET_INLINE SampleGrad<A> col2im_sample(
    const Sample<A>& p, int64_t c_begin, int64_t c_end, const T* input,
    T* columns, const DeformConvShape& s, Load load, Store store,
    AddPair add_pair) {
  SampleGrad<A> g{A(0), A(0), A(0)};
  const Corners<A> c = corners(p.y, p.x, s.height, s.width);
  const int64_t hw = s.height * s.width;
  const int64_t channel = p.group * s.channels_per_group() + c_begin;
  int64_t in_index = (p.b * s.channels + channel) * hw + c.y0 * s.width + c.x0;
  const int64_t row_stride = s.kernel_points() * s.columns_width();
  T* col = columns + (channel * s.kernel_points() + p.point) * s.columns_width() +
           p.column;
  if (!c.inside) {  // the sample is 0: no gradient, and its columns are 0
    for (int64_t ch = c_begin; ch < c_end; ++ch) {
      *col = store(A(0));
      col += row_stride;
    }
    return g;
  }
  const A hy = A(1) - c.ly, hx = A(1) - c.lx;
  const A w00 = hy * hx, w01 = hy * c.lx, w10 = c.ly * hx, w11 = c.ly * c.lx;
  // im2col_sample's weights (mask folded in), for the column values.
  const A m00 = w00 * p.m, m01 = w01 * p.m, m10 = w10 * p.m, m11 = w11 * p.m;
  // Channels go in batches of kBatch whose loads all come before the batch's
  // stores: the compiler may not move a load of `columns` above a store to
  // it (the row stride is a runtime value), so a plain loop would wait for
  // each channel's grad_columns load (from DRAM) in turn. (4 and 8 measured
  // the same on the H100.)
  constexpr int kBatch = 4;
  const int64_t count = c_end - c_begin;
  A gc[kBatch], v00[kBatch], v01[kBatch], v10[kBatch], v11[kBatch];
  for (int64_t j = 0; j < count; j += kBatch) {
    const int n = count - j < kBatch ? static_cast<int>(count - j) : kBatch;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int u = 0; u < kBatch; ++u) {
      if (u < n) {
        const int64_t i = in_index + (j + u) * hw;
        gc[u] = load(col[(j + u) * row_stride]);
        v00[u] = c.v00 ? load(input[i]) : A(0);
        v01[u] = c.v01 ? load(input[i + 1]) : A(0);
        v10[u] = c.v10 ? load(input[i + s.width]) : A(0);
        v11[u] = c.v11 ? load(input[i + s.width + 1]) : A(0);
      }
    }
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int u = 0; u < kBatch; ++u) {
      if (u < n) {
        const int64_t i = in_index + (j + u) * hw;
        A v = A(0);
        if (c.v00) v += m00 * v00[u];
        if (c.v01) v += m01 * v01[u];
        if (c.v10) v += m10 * v10[u];
        if (c.v11) v += m11 * v11[u];
        col[(j + u) * row_stride] = store(v);
        g.m += gc[u] * (w00 * v00[u] + w01 * v01[u] + w10 * v10[u] + w11 * v11[u]);
        const A gm = gc[u] * p.m;
        g.y += gm * (hx * (v10[u] - v00[u]) + c.lx * (v11[u] - v01[u]));
        g.x += gm * (hy * (v01[u] - v00[u]) + c.ly * (v11[u] - v10[u]));
        add_pair(i, gm * w00, gm * w01, c.v00, c.v01);
        add_pair(i + s.width, gm * w10, gm * w11, c.v10, c.v11);
      }
    }
  }
  return g;
}

}  // namespace deform_conv_detail
}  // namespace visdet_ops
