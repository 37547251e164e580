// Torch-free entry points of the masked_conv2d gathers and scatters.
#pragma once

#include <cstdint>

#include "masked_conv_kernel.h"

#if defined(VISDET_OPS_WITH_CUDA)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#endif

namespace visdet_ops {

using MaskedConvGeometry = masked_conv_detail::Geometry;

// Elements [begin, end) of cols [P, C*KH*KW] from input [N, C, H, W] at
// idx [P, 3] (n, h, w).
template <typename T>
void masked_im2col_cpu(const T* input, const int64_t* idx,
                       const MaskedConvGeometry& g, int64_t begin, int64_t end,
                       T* cols);
// output[n, co, h, w] = rows[p, co] for idx[p] = (n, h, w); output [N, C_out,
// H_out, W_out] zeroed by the caller.
template <typename T>
void masked_col2im_cpu(const T* rows, const int64_t* idx, int64_t num_pos,
                       int64_t out_channels, int64_t out_h, int64_t out_w,
                       T* output);
// Elements [begin, end) of grad_input [N, C, H, W] from grad_cols [P, K].
template <typename T>
void masked_conv_grad_input_cpu(const T* grad_cols, const int64_t* pos_map,
                                const MaskedConvGeometry& g, int64_t begin,
                                int64_t end, T* grad_input);

#if defined(VISDET_OPS_WITH_CUDA)
// T: float, double, __half, __nv_bfloat16; C, the column type: float for the
// 16-bit types (the GEMM runs in float32), else T.
template <typename T, typename C>
cudaError_t masked_im2col_cuda_launch(const T* input, const int64_t* idx,
                                      int64_t num_pos,
                                      const MaskedConvGeometry& g, C* cols,
                                      cudaStream_t stream);
template <typename T, typename C>
cudaError_t masked_col2im_cuda_launch(const C* rows, const int64_t* idx,
                                      int64_t num_pos, int64_t out_channels,
                                      int64_t out_h, int64_t out_w, T* output,
                                      cudaStream_t stream);
template <typename T, typename C>
cudaError_t masked_conv_grad_input_cuda_launch(const C* grad_cols,
                                               const int64_t* pos_map,
                                               int64_t batch,
                                               const MaskedConvGeometry& g,
                                               T* grad_input,
                                               cudaStream_t stream);
#endif

}  // namespace visdet_ops
