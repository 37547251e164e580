// Torch-facing layer of deform_conv shared by the CPU and CUDA host code:
// argument checks, chunking over the batch and the GEMMs (at::mm/addmm, so
// cuBLAS on CUDA). The device layers supply only the im2col / col2im kernels.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <optional>

#include "deform_conv_launch.h"

namespace visdet_ops {

struct DeformConvParams {
  int64_t stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w;
  int64_t groups, deform_groups, im2col_step;
};

// Checked, contiguous arguments and the whole-batch shape.
struct DeformConvArgs {
  DeformConvShape shape;  // batch = N
  DeformConvParams params;
  int64_t out_channels;
  at::Tensor input, offset, mask, weight, bias;  // mask, bias may be undefined
};

DeformConvArgs deform_conv_prepare(const at::Tensor& input,
                                   const at::Tensor& offset,
                                   const std::optional<at::Tensor>& mask,
                                   const at::Tensor& weight,
                                   const std::optional<at::Tensor>& bias,
                                   const DeformConvParams& params);

// Device kernels on one chunk (tensors are the chunk's slices, contiguous).
struct DeformConvKernels {
  // columns: [C * KK, B * OH * OW], fully written.
  std::function<void(const at::Tensor& input, const at::Tensor& offset,
                     const at::Tensor& mask, const DeformConvShape& s,
                     at::Tensor& columns)>
      im2col;
  // Number of channel slices col2im splits a deform group into.
  std::function<int64_t(const DeformConvShape& s)> channel_slices;
  // columns: grad_columns [C * KK, B * OH * OW] on entry, overwritten with
  // the columns (what im2col writes) on exit.
  // grad_input: [B, C, H, W] in the accumulation type (+=);
  // grad_offset: [slices, B, 2 * DG * KK, OH * OW], grad_mask: [slices, B,
  // DG * KK, OH * OW] (or undefined without mask) in the accumulation type,
  // fully written.
  std::function<void(const at::Tensor& input, const at::Tensor& offset,
                     const at::Tensor& mask, at::Tensor& columns,
                     const DeformConvShape& s, int64_t slices,
                     at::Tensor& grad_input, at::Tensor& grad_offset,
                     at::Tensor& grad_mask)>
      col2im;
};

at::Tensor deform_conv_forward_impl(const DeformConvArgs& a,
                                    const DeformConvKernels& kernels);

// (grad_input, grad_offset, grad_mask, grad_weight, grad_bias); grad_mask
// and grad_bias are empty [0] tensors when there is no mask / bias.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
deform_conv_backward_impl(const at::Tensor& grad_output,
                          const DeformConvArgs& a,
                          const DeformConvKernels& kernels);

}  // namespace visdet_ops
