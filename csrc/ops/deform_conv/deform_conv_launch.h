// Torch-free entry points of the deformable convolution kernels (DCNv1 and
// DCNv2; v1 is v2 without a mask): pointers, sizes, stream.
//
// Both kernels work on one chunk of `batch` images and on the column matrix
// of that chunk, [C * KH * KW, batch * OH * OW]: row c * KH * KW + k holds
// channel c sampled at kernel point k, column b * OH * OW + p output pixel p
// of image b. One thread handles one "sample" (image, deform group, kernel
// point, output pixel): it computes the sample position and its bilinear
// weights once and loops over the channels of its deform group (or a slice
// of them), so the weights are not recomputed per channel.
#pragma once

#include <cstdint>

#include "common/macros.h"

#if defined(VISDET_OPS_WITH_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace visdet_ops {

struct DeformConvShape {
  int64_t batch;  // images in this chunk
  int64_t channels, height, width;
  int64_t out_h, out_w;
  int64_t kernel_h, kernel_w;
  int64_t stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w;
  int64_t deform_groups;
  VISDET_HOST_DEVICE int64_t kernel_points() const {
    return kernel_h * kernel_w;
  }
  VISDET_HOST_DEVICE int64_t out_plane() const { return out_h * out_w; }
  VISDET_HOST_DEVICE int64_t columns_width() const {
    return batch * out_h * out_w;
  }
  VISDET_HOST_DEVICE int64_t channels_per_group() const {
    return channels / deform_groups;
  }
  // Threads of one channel slice.
  VISDET_HOST_DEVICE int64_t samples() const {
    return deform_groups * kernel_points() * columns_width();
  }
};

// Forward: columns[C * KK, B * OH * OW] = mask * bilinear(input at
// base + offset), for samples [begin, end) of [0, s.samples()). mask may be
// null (DCNv1).
template <typename T>
void deform_conv_im2col_cpu(const T* input, const T* offset, const T* mask,
                            const DeformConvShape& s, int64_t begin,
                            int64_t end, T* columns);

// Backward of im2col for image `image` of the chunk. `columns` holds
// grad_columns on entry and the image's columns (what im2col writes) on exit.
// Accumulates into grad_input (+=, [B, C, H, W]; the caller zeroes it) and
// writes grad_offset [B, 2 * DG * KK, OH, OW] and, when mask is not null,
// grad_mask [B, DG * KK, OH, OW].
template <typename T>
void deform_conv_col2im_cpu(const T* input, const T* offset, const T* mask,
                            T* columns, const DeformConvShape& s,
                            int64_t image, T* grad_input, T* grad_offset,
                            T* grad_mask);

#if defined(VISDET_OPS_WITH_CUDA)
// Channel slices the CUDA backward splits each deform group into (enough
// threads to fill the GPU when DG * KK * B * OH * OW is small).
int64_t deform_conv_cuda_channel_slices(const DeformConvShape& s);

// T: float, double, __half, __nv_bfloat16 (instantiated in the .cu); the
// kernels compute in float (double for double).
template <typename T>
cudaError_t deform_conv_im2col_cuda_launch(const T* input, const T* offset,
                                           const T* mask,
                                           const DeformConvShape& s,
                                           T* columns, cudaStream_t stream);

// A = acc type of T (float, or double for double). `columns` holds
// grad_columns on entry and the columns (what im2col writes) on exit, so the
// weight gradient needs no second im2col. grad_input is an A
// buffer accumulated with atomicAdd (zeroed by the caller). grad_offset and
// grad_mask are A buffers [slices, B, 2 * DG * KK, OH * OW] and
// [slices, B, DG * KK, OH * OW] of per-slice partial sums (fully written;
// the caller sums over slices).
template <typename T, typename A>
cudaError_t deform_conv_col2im_cuda_launch(const T* input, const T* offset,
                                           const T* mask,
                                           T* columns,
                                           const DeformConvShape& s,
                                           int64_t slices, A* grad_input,
                                           A* grad_offset, A* grad_mask,
                                           cudaStream_t stream);


// out [rows, cols] += bias [rows] (one broadcast add, rounded once).
template <typename T>
cudaError_t deform_conv_add_bias_cuda_launch(T* out, const T* bias,
                                             int64_t rows, int64_t cols,
                                             cudaStream_t stream);

// out[i] = sum over s < slices of parts[s * numel + i]: col2im's per-slice
// partial offset / mask gradients, summed in slice order.
template <typename T, typename A>
cudaError_t deform_conv_sum_slices_cuda_launch(const A* parts, int64_t slices,
                                               int64_t numel, T* out,
                                               cudaStream_t stream);

// Whether im2col and col2im of this chunk, on CUDA device `device`, take the
// channels-last kernels below: channels per deform group a multiple of 4, a
// device with float4 atomicAdd (sm_90+), sizes the transposes' grids take.
// Float accumulation only (the caller checks the dtype: not double). Where
// it holds for a batch it holds for each chunk of it (only the transposes'
// grid bounds the batch, and chunks are no larger).
bool deform_conv_cuda_channels_last(const DeformConvShape& s, int device);

// im2col through a channels-last copy: transposes input ([B, C, H, W]) into
// input_nhwc (scratch of the same size, [B, H, W, C]), then samples four
// channels per vector load. T: float, __half, __nv_bfloat16.
template <typename T>
cudaError_t deform_conv_im2col_nhwc_cuda_launch(const T* input,
                                                const T* offset, const T* mask,
                                                const DeformConvShape& s,
                                                T* input_nhwc, T* columns,
                                                cudaStream_t stream);

// col2im through channels-last copies: input_nhwc and grad_nhwc are scratch
// buffers of the input's size (T and float); the gradient is accumulated in
// grad_nhwc and then transposed into grad_input, which is overwritten (no
// zero fill needed). The rest as deform_conv_col2im_cuda_launch.
template <typename T>
cudaError_t deform_conv_col2im_nhwc_cuda_launch(
    const T* input, const T* offset, const T* mask, T* columns,
    const DeformConvShape& s, int64_t slices, T* input_nhwc, float* grad_nhwc,
    float* grad_input, float* grad_offset, float* grad_mask,
    cudaStream_t stream);

#endif

}  // namespace visdet_ops
