// The CUDA part of the host adapter (common/host.h): device guard, the current
// stream, CUDA error checks. Included by *_cuda_host.cpp only (a CUDA build).
//
// Stable build: the guard is torch::stable::accelerator::DeviceGuard (a shim
// of libtorch_cpu). The stream comes from aoti_torch_get_current_cuda_stream,
// looked up at run time in the libtorch_cuda.so that a CUDA torch has loaded,
// and errors are checked with our own statically linked CUDA runtime
// (setup.py links libcudart_static for stable CUDA builds). So a stable CUDA
// extension has no link-time dependency on libtorch_cuda, libc10_cuda or
// libcudart: the same cu13 wheel loads beside a CPU-only torch (its CUDA
// kernels are then simply never reached), and beside every CUDA 13.x torch.
#pragma once

#include <cuda_runtime_api.h>

#include "common/host.h"

#if defined(VISDET_OPS_STABLE_ABI)
#include <dlfcn.h>

#include <optional>
#include <string>

#include <torch/csrc/stable/accelerator.h>
#else
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace visdet_ops {
namespace host {

#if defined(VISDET_OPS_STABLE_ABI)

// Makes t's GPU the current device for the scope (allocations, launches).
// A t that is not on a GPU sets nothing: a CUDA kernel reached with a CPU
// tensor among its arguments (mixed devices) must get to the op's own
// same-device check and its message, not fail in the guard.
class CudaDeviceGuard {
 public:
  explicit CudaDeviceGuard(const Tensor& t) {
    if (t.is_cuda()) guard_.emplace(t.get_device_index());
  }

 private:
  std::optional<torch::stable::accelerator::DeviceGuard> guard_;
};

namespace detail {

// aoti_torch_get_current_cuda_stream(device_index, &stream), from the
// libtorch_cuda.so a CUDA torch has loaded; nullptr for a CPU-only torch.
using GetCurrentCudaStream = int32_t (*)(int32_t, void**);

inline GetCurrentCudaStream find_get_current_cuda_stream() {
  const char* name = "aoti_torch_get_current_cuda_stream";
  void* symbol = dlsym(RTLD_DEFAULT, name);
  if (symbol == nullptr) {
    // torch loads libtorch_cuda.so with RTLD_LOCAL: ask for it by name
    // (RTLD_NOLOAD: only if it is already loaded, never load a second one).
    void* lib = dlopen("libtorch_cuda.so", RTLD_LAZY | RTLD_NOLOAD);
    if (lib != nullptr) {
      symbol = dlsym(lib, name);
    }
  }
  return reinterpret_cast<GetCurrentCudaStream>(symbol);
}

}  // namespace detail

// The stream torch is using on t's GPU.
inline cudaStream_t current_cuda_stream(const Tensor& t) {
  static const detail::GetCurrentCudaStream get =
      detail::find_get_current_cuda_stream();
  VISDET_CHECK(get != nullptr,
               "visdet_ops: a CUDA tensor, but the running torch has no "
               "aoti_torch_get_current_cuda_stream (libtorch_cuda.so not "
               "loaded)");
  void* stream = nullptr;
  VISDET_CHECK(get(t.get_device_index(), &stream) == 0,
               "visdet_ops: torch could not give the current CUDA stream of "
               "device ",
               t.get_device_index());
  return static_cast<cudaStream_t>(stream);
}

// Raises the CUDA runtime's error text, as C10_CUDA_CHECK does.
#define VISDET_CUDA_CHECK(expr)                                          \
  do {                                                                   \
    const cudaError_t visdet_cuda_error_ = (expr);                      \
    if (visdet_cuda_error_ != cudaSuccess) {                             \
      throw std::runtime_error(std::string("CUDA error: ") +             \
                               cudaGetErrorString(visdet_cuda_error_)); \
    }                                                                    \
  } while (0)

#else

// As above: a t that is not on a GPU sets nothing (see the stable one).
class CudaDeviceGuard {
 public:
  explicit CudaDeviceGuard(const Tensor& t) {
    if (t.is_cuda()) guard_.set_device(t.device());
  }

 private:
  c10::cuda::OptionalCUDAGuard guard_;
};

inline cudaStream_t current_cuda_stream(const Tensor& t) {
  return c10::cuda::getCurrentCUDAStream(t.device().index());
}

#define VISDET_CUDA_CHECK(expr) C10_CUDA_CHECK(expr)

#endif

}  // namespace host
}  // namespace visdet_ops
