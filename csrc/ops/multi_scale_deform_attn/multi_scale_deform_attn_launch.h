// Torch-free entry points of multi-scale deformable attention.
//
// value [B, K, M, D], sampling_locations [B, Q, M, L, P, 2] (x, y),
// attention_weights [B, Q, M, L, P], output [B, Q, M, D]; all contiguous.
// spatial_shapes [L, 2] (H, W) and level_start_index [L] are int64,
// contiguous, on the kernel's device, and already validated by the host
// layer (every level lies inside [0, K)).
#pragma once

#include <cstdint>

#include "common/macros.h"
#include "common/scalar.h"

#if defined(VISDET_OPS_WITH_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace visdet_ops {

struct MSDAShape {
  int64_t batch, num_keys, num_heads, head_dim, num_queries, num_levels,
      num_points;
  VISDET_HOST_DEVICE int64_t rows() const { return batch * num_queries * num_heads; }
};

// CPU forward of the rows [begin, end) of the flattened [B * Q * M] rows.
// T: float, double, HostHalf, HostBFloat16 (value read directly, computed in
// float); loc, attn and the gradients in acc_t<T>, as on CUDA.
template <typename T>
void msda_forward_cpu(const T* value, const int64_t* spatial_shapes,
                      const int64_t* level_start, const acc_t<T>* loc,
                      const acc_t<T>* attn, const MSDAShape& s, int64_t begin,
                      int64_t end, T* out);

// CPU backward of the (batch, head) pairs [begin, end) of [B * M]: each pair
// owns its slice of grad_value, so pairs run in parallel without atomics and
// the result is deterministic. The grads must be zeroed by the caller.
template <typename T>
void msda_backward_cpu(const T* grad_out, const T* value,
                       const int64_t* spatial_shapes,
                       const int64_t* level_start, const acc_t<T>* loc,
                       const acc_t<T>* attn, const MSDAShape& s, int64_t begin,
                       int64_t end, acc_t<T>* grad_value, acc_t<T>* grad_loc,
                       acc_t<T>* grad_attn);

#if defined(VISDET_OPS_WITH_CUDA)
// float, double, __half or __nv_bfloat16 (computed in float for the last two),
// passed as void pointers so that this header stays free of cuda_fp16. loc
// and attn are in the compute type (float32 for the 16-bit types).
enum class MSDADtype { kFloat, kDouble, kHalf, kBFloat16 };

cudaError_t msda_forward_cuda_launch(MSDADtype dtype, const void* value,
                                     const int64_t* spatial_shapes,
                                     const int64_t* level_start,
                                     const void* loc, const void* attn,
                                     const MSDAShape& s, void* out,
                                     cudaStream_t stream);

// The grads are float32 for float32/float16/bfloat16 inputs and float64 for
// float64 inputs (accumulation buffers: grad_value takes atomicAdds), zeroed
// by the caller.
cudaError_t msda_backward_cuda_launch(MSDADtype dtype, const void* grad_out,
                                      const void* value,
                                      const int64_t* spatial_shapes,
                                      const int64_t* level_start,
                                      const void* loc, const void* attn,
                                      const MSDAShape& s, void* grad_value,
                                      void* grad_loc, void* grad_attn,
                                      cudaStream_t stream);
#endif

}  // namespace visdet_ops
