// Torch-free float16 / bfloat16 conversions for .cu files.
//
// torch.utils.cpp_extension compiles every .cu with -D__CUDA_NO_HALF_CONVERSIONS__
// and -D__CUDA_NO_BFLOAT16_CONVERSIONS__, which remove the implicit conversions
// (static_cast<float>(__half) does not compile there): convert through these.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace visdet_ops {
namespace cuda {

// The type a kernel computes in for storage type T: float for the 16-bit
// types and float, double for double.
template <typename T>
struct Acc {
  using type = float;
};
template <>
struct Acc<double> {
  using type = double;
};
template <typename T>
using acc_t = typename Acc<T>::type;

__device__ __forceinline__ float to_acc(float x) { return x; }
__device__ __forceinline__ double to_acc(double x) { return x; }
__device__ __forceinline__ float to_acc(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_acc(__nv_bfloat16 x) {
  return __bfloat162float(x);
}

template <typename T>
__device__ __forceinline__ T from_acc(acc_t<T> x);
template <>
__device__ __forceinline__ float from_acc<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ double from_acc<double>(double x) {
  return x;
}
template <>
__device__ __forceinline__ __half from_acc<__half>(float x) {
  return __float2half_rn(x);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_acc<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

}  // namespace cuda
}  // namespace visdet_ops
