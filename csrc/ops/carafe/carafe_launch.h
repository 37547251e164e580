// Torch-free entry points of the CARAFE kernels.
#pragma once

#include <cstdint>

#include "carafe_kernel.h"

#if defined(VISDET_OPS_WITH_CUDA)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#endif

namespace visdet_ops {

using CarafeShape = carafe_detail::Shape;

// Elements [begin, end) of the output / the features gradient / the masks
// gradient (each element written once; no zeroing needed). T: float, double,
// HostHalf, HostBFloat16 (read directly, computed in float, rounded once).
template <typename T>
void carafe_forward_cpu(const T* features, const T* masks, const CarafeShape& s,
                        int64_t begin, int64_t end, T* output);
template <typename T>
void carafe_grad_features_cpu(const T* grad_output, const T* masks,
                              const CarafeShape& s, int64_t begin, int64_t end,
                              T* grad_features);
template <typename T>
void carafe_grad_masks_cpu(const T* grad_output, const T* features,
                           const CarafeShape& s, int64_t begin, int64_t end,
                           T* grad_masks);

#if defined(VISDET_OPS_WITH_CUDA)
// T: float, double, __half, __nv_bfloat16 (computed in float).
// tiled: the shared-memory kernels of carafe (masks of a 32 x 8 output tile
// kept on chip across a chunk of channels); otherwise the direct one-thread-
// per-element kernels of carafe_naive. Both write every element once (no
// atomics: deterministic).
template <typename T>
cudaError_t carafe_forward_cuda_launch(const T* features, const T* masks,
                                       const CarafeShape& s, bool tiled,
                                       T* output, cudaStream_t stream);
template <typename T>
cudaError_t carafe_backward_cuda_launch(const T* grad_output, const T* features,
                                        const T* masks, const CarafeShape& s,
                                        bool tiled, T* grad_features,
                                        T* grad_masks, cudaStream_t stream);
#endif

}  // namespace visdet_ops
