// Torch-free entry points of the corner-pool kernels.
#pragma once

#include <cstdint>

#if defined(VISDET_OPS_WITH_CUDA)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#endif

namespace visdet_ops {

// [outer, length, inner] view of the input; `reverse`: scan from the end
// (top and left pools).
struct CornerPoolShape {
  int64_t outer, length, inner;
  bool reverse;
  int64_t lanes() const { return outer * inner; }
};

// Lanes of outer rows [begin, end).
template <typename T>
void corner_pool_forward_cpu(const T* input, const CornerPoolShape& s,
                             int64_t begin, int64_t end, T* output);

// grad_input must be zeroed by the caller. Deterministic: every lane is
// scanned by one thread, no atomics.
template <typename T>
void corner_pool_backward_cpu(const T* grad_output, const T* input,
                              const CornerPoolShape& s, int64_t begin,
                              int64_t end, T* grad_input);

#if defined(VISDET_OPS_WITH_CUDA)
// T: float, double, __half, __nv_bfloat16 (compared and summed in float).
template <typename T>
cudaError_t corner_pool_forward_cuda_launch(const T* input,
                                            const CornerPoolShape& s,
                                            T* output, cudaStream_t stream);

// grad_input must be zeroed by the caller. One thread per lane, no atomics:
// deterministic.
template <typename T>
cudaError_t corner_pool_backward_cuda_launch(const T* grad_output,
                                             const T* input,
                                             const CornerPoolShape& s,
                                             T* grad_input,
                                             cudaStream_t stream);
#endif

}  // namespace visdet_ops
