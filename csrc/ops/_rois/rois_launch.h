// Torch-free entry points of the RoI validation kernels.
#pragma once

#include <cstdint>

#if defined(VISDET_OPS_WITH_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace visdet_ops {

// OR of roi_flags over rois [k, columns] (contiguous).
template <typename T>
int rois_flags_cpu(const T* rois, int64_t k, int columns, int64_t batch_size);

#if defined(VISDET_OPS_WITH_CUDA)
// Writes the OR of roi_flags over rois [k, columns] to *flags (device
// memory); one launch, no allocation.
template <typename T>
cudaError_t rois_flags_cuda_launch(const T* rois, int64_t k, int columns,
                                   int64_t batch_size, int* flags,
                                   cudaStream_t stream);
#endif

}  // namespace visdet_ops
