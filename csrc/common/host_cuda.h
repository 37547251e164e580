// The CUDA part of the host adapter (common/host.h): device guard, the current
// stream, CUDA error checks. Included by *_cuda_host.cpp only (a CUDA build).
//
// Stable build: the stream comes from aoti_torch_get_current_cuda_stream (the
// only shim call that returns a cudaStream_t; declared under USE_CUDA, which
// setup.py defines for the stable CUDA build), the guard from
// torch::stable::accelerator::DeviceGuard, the check from STD_CUDA_CHECK.
#pragma once

#include <cuda_runtime_api.h>

#include "common/host.h"

#if defined(VISDET_OPS_STABLE_ABI)
#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/macros.h>
#else
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace visdet_ops {
namespace host {

#if defined(VISDET_OPS_STABLE_ABI)

// Makes t's GPU the current device for the scope (allocations, launches).
class CudaDeviceGuard {
 public:
  explicit CudaDeviceGuard(const Tensor& t) : guard_(t.get_device_index()) {}

 private:
  torch::stable::accelerator::DeviceGuard guard_;
};

// The stream torch is using on t's GPU.
inline cudaStream_t current_cuda_stream(const Tensor& t) {
  void* stream = nullptr;
  TORCH_ERROR_CODE_CHECK(
      aoti_torch_get_current_cuda_stream(t.get_device_index(), &stream));
  return static_cast<cudaStream_t>(stream);
}

#define VISDET_CUDA_CHECK(expr) STD_CUDA_CHECK(expr)

#else

class CudaDeviceGuard {
 public:
  explicit CudaDeviceGuard(const Tensor& t) : guard_(t.device()) {}

 private:
  c10::cuda::CUDAGuard guard_;
};

inline cudaStream_t current_cuda_stream(const Tensor& t) {
  return c10::cuda::getCurrentCUDAStream(t.device().index());
}

#define VISDET_CUDA_CHECK(expr) C10_CUDA_CHECK(expr)

#endif

}  // namespace host
}  // namespace visdet_ops
