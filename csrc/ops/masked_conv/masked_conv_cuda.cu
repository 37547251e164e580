// masked_conv2d gathers and scatters on CUDA: grid-stride loops, one thread
// per written element (every element is written once: no atomics).
#include <cstdint>

#include "common/cuda_helpers.cuh"
#include "common/scalar.h"
#include "masked_conv_kernel.h"
#include "masked_conv_launch.h"

namespace visdet_ops {
namespace {

template <typename T, typename C>
__global__ void masked_im2col_kernel(const T* __restrict__ input,
                                     const int64_t* __restrict__ idx,
                                     int64_t n, MaskedConvGeometry g,
                                     C* __restrict__ cols) {
  auto load = [](T v) { return static_cast<C>(to_acc(v)); };
  auto cast = [](int v) { return static_cast<C>(v); };
  cuda::grid_stride_loop<int64_t>(n, [&](int64_t e) {
    cols[e] = masked_conv_detail::im2col_element<T, C>(e, input, idx, g, load,
                                                       cast);
  });
}

template <typename T, typename C>
__global__ void masked_col2im_kernel(const C* __restrict__ rows,
                                     const int64_t* __restrict__ idx,
                                     int64_t n, int64_t out_channels,
                                     int64_t out_h, int64_t out_w,
                                     T* __restrict__ output) {
  cuda::grid_stride_loop<int64_t>(n, [&](int64_t e) {
    const int64_t p = e / out_channels, co = e - p * out_channels;
    const int64_t b = idx[3 * p], h = idx[3 * p + 1], w = idx[3 * p + 2];
    output[((b * out_channels + co) * out_h + h) * out_w + w] =
        from_acc<T>(static_cast<acc_t<T>>(rows[e]));
  });
}

template <typename T, typename C>
__global__ void masked_conv_grad_input_kernel(const C* __restrict__ grad_cols,
                                              const int64_t* __restrict__ pos_map,
                                              int64_t n, MaskedConvGeometry g,
                                              T* __restrict__ grad_input) {
  cuda::grid_stride_loop<int64_t>(n, [&](int64_t e) {
    const C v = masked_conv_detail::grad_input_element<C>(e, grad_cols,
                                                          pos_map, g);
    grad_input[e] = from_acc<T>(static_cast<acc_t<T>>(v));
  });
}

}  // namespace

template <typename T, typename C>
cudaError_t masked_im2col_cuda_launch(const T* input, const int64_t* idx,
                                      int64_t num_pos,
                                      const MaskedConvGeometry& g, C* cols,
                                      cudaStream_t stream) {
  const int64_t n = num_pos * g.channels * g.kh * g.kw;
  if (n == 0) return cudaSuccess;
  masked_im2col_kernel<T, C>
      <<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, stream>>>(input, idx,
                                                                   n, g, cols);
  return cudaGetLastError();
}

template <typename T, typename C>
cudaError_t masked_col2im_cuda_launch(const C* rows, const int64_t* idx,
                                      int64_t num_pos, int64_t out_channels,
                                      int64_t out_h, int64_t out_w, T* output,
                                      cudaStream_t stream) {
  const int64_t n = num_pos * out_channels;
  if (n == 0) return cudaSuccess;
  masked_col2im_kernel<T, C>
      <<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, stream>>>(
          rows, idx, n, out_channels, out_h, out_w, output);
  return cudaGetLastError();
}

template <typename T, typename C>
cudaError_t masked_conv_grad_input_cuda_launch(const C* grad_cols,
                                               const int64_t* pos_map,
                                               int64_t batch,
                                               const MaskedConvGeometry& g,
                                               T* grad_input,
                                               cudaStream_t stream) {
  const int64_t n = batch * g.channels * g.height * g.width;
  if (n == 0) return cudaSuccess;
  masked_conv_grad_input_kernel<T, C>
      <<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, stream>>>(
          grad_cols, pos_map, n, g, grad_input);
  return cudaGetLastError();
}

#define VISDET_INSTANTIATE(T, C)                                             \
  template cudaError_t masked_im2col_cuda_launch<T, C>(                      \
      const T*, const int64_t*, int64_t, const MaskedConvGeometry&, C*,      \
      cudaStream_t);                                                         \
  template cudaError_t masked_col2im_cuda_launch<T, C>(                      \
      const C*, const int64_t*, int64_t, int64_t, int64_t, int64_t, T*,      \
      cudaStream_t);                                                         \
  template cudaError_t masked_conv_grad_input_cuda_launch<T, C>(             \
      const C*, const int64_t*, int64_t, const MaskedConvGeometry&, T*,      \
      cudaStream_t);
VISDET_INSTANTIATE(float, float)
VISDET_INSTANTIATE(double, double)
VISDET_INSTANTIATE(__half, float)
VISDET_INSTANTIATE(__nv_bfloat16, float)
#undef VISDET_INSTANTIATE

}  // namespace visdet_ops
