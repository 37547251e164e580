#include "common/cuda_helpers.cuh"
#include "rois_kernel.h"
#include "rois_launch.h"

namespace visdet_ops {
namespace {

constexpr int kValidateThreads = 512;

// One block: a few thousand RoIs take microseconds, and a single block needs
// no atomics and no zeroed output.
template <typename T>
__global__ void rois_flags_kernel(const T* __restrict__ rois, int64_t k,
                                  int columns, int64_t batch_size,
                                  int* flags) {
  int local = 0;
  for (int64_t i = threadIdx.x; i < k; i += blockDim.x) {
    local |= roi_flags(rois + columns * i, batch_size, columns);
  }
  const int non_finite = __syncthreads_or(local & kRoINonFinite);
  const int bad_batch = __syncthreads_or(local & kRoIBadBatch);
  if (threadIdx.x == 0) {
    *flags = (non_finite ? kRoINonFinite : 0) | (bad_batch ? kRoIBadBatch : 0);
  }
}

}  // namespace

template <typename T>
cudaError_t rois_flags_cuda_launch(const T* rois, int64_t k, int columns,
                                   int64_t batch_size, int* flags,
                                   cudaStream_t stream) {
  rois_flags_kernel<T><<<1, kValidateThreads, 0, stream>>>(rois, k, columns,
                                                          batch_size, flags);
  return cudaGetLastError();
}

#define VISDET_INSTANTIATE(T)                                          \
  template cudaError_t rois_flags_cuda_launch<T>(const T*, int64_t, int, \
                                                 int64_t, int*,          \
                                                 cudaStream_t);
VISDET_FOR_FLOATING_TYPES(VISDET_INSTANTIATE)
#undef VISDET_INSTANTIATE

}  // namespace visdet_ops
