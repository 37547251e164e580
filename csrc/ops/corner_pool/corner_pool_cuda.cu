// CUDA corner pooling: one thread scans one lane. For H pools neighbouring
// threads own neighbouring columns, so every step is a coalesced row access.
// For W pools (inner == 1) a thread walks its own row; each warp still reads
// whole 32-byte sectors that the following steps reuse from L1.
#include <cstdint>

#include "common/cuda_helpers.cuh"
#include "common/cuda_types.cuh"
#include "corner_pool_kernel.h"
#include "corner_pool_launch.h"

namespace visdet_ops {
namespace {

using corner_pool_detail::takes_over;

template <typename T>
__global__ void corner_pool_forward_kernel(const T* __restrict__ input,
                                           CornerPoolShape s,
                                           T* __restrict__ output) {
  using A = cuda::acc_t<T>;
  const int64_t L = s.length, inner = s.inner;
  cuda::grid_stride_loop<int64_t>(s.outer * inner, [&](int64_t lane) {
    const int64_t o = lane / inner, i = lane - o * inner;
    const int64_t base = o * L * inner + i;
    T best_raw = input[base];
    A best = cuda::to_acc(best_raw);
    for (int64_t step = 0; step < L; ++step) {
      const int64_t off = base + (s.reverse ? L - 1 - step : step) * inner;
      const T raw = input[off];
      const A x = cuda::to_acc(raw);
      if (step == 0 || takes_over(x, best)) {
        best = x;
        best_raw = raw;
      }
      output[off] = best_raw;
    }
  });
}

template <typename T>
__global__ void corner_pool_backward_kernel(const T* __restrict__ grad_output,
                                            const T* __restrict__ input,
                                            CornerPoolShape s,
                                            T* __restrict__ grad_input) {
  using A = cuda::acc_t<T>;
  const int64_t L = s.length, inner = s.inner;
  cuda::grid_stride_loop<int64_t>(s.outer * inner, [&](int64_t lane) {
    const int64_t o = lane / inner, i = lane - o * inner;
    const int64_t base = o * L * inner + i;
    A best = A(0), acc = A(0);
    int64_t arg = base;
    for (int64_t step = 0; step < L; ++step) {
      const int64_t off = base + (s.reverse ? L - 1 - step : step) * inner;
      const A x = cuda::to_acc(input[off]);
      if (step == 0 || takes_over(x, best)) {
        if (step != 0) grad_input[arg] = cuda::from_acc<T>(acc);
        best = x;
        arg = off;
        acc = A(0);
      }
      acc += cuda::to_acc(grad_output[off]);
    }
    if (L > 0) grad_input[arg] = cuda::from_acc<T>(acc);
  });
}

}  // namespace

template <typename T>
cudaError_t corner_pool_forward_cuda_launch(const T* input,
                                            const CornerPoolShape& s,
                                            T* output, cudaStream_t stream) {
  const int64_t lanes = s.lanes();
  if (lanes == 0 || s.length == 0) return cudaSuccess;
  corner_pool_forward_kernel<T>
      <<<cuda::blocks_for(lanes), cuda::kThreadsPerBlock, 0, stream>>>(
          input, s, output);
  return cudaGetLastError();
}

template <typename T>
cudaError_t corner_pool_backward_cuda_launch(const T* grad_output,
                                             const T* input,
                                             const CornerPoolShape& s,
                                             T* grad_input,
                                             cudaStream_t stream) {
  const int64_t lanes = s.lanes();
  if (lanes == 0 || s.length == 0) return cudaSuccess;
  corner_pool_backward_kernel<T>
      <<<cuda::blocks_for(lanes), cuda::kThreadsPerBlock, 0, stream>>>(
          grad_output, input, s, grad_input);
  return cudaGetLastError();
}

#define VISDET_INSTANTIATE(T)                                                \
  template cudaError_t corner_pool_forward_cuda_launch<T>(                   \
      const T*, const CornerPoolShape&, T*, cudaStream_t);                   \
  template cudaError_t corner_pool_backward_cuda_launch<T>(                  \
      const T*, const T*, const CornerPoolShape&, T*, cudaStream_t);
VISDET_INSTANTIATE(float)
VISDET_INSTANTIATE(double)
VISDET_INSTANTIATE(__half)
VISDET_INSTANTIATE(__nv_bfloat16)
#undef VISDET_INSTANTIATE

}  // namespace visdet_ops
