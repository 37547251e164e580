// Torch-facing CUDA host helper: the torch-free CUDA type of an ATen scalar
// type, for handing data pointers of AT_DISPATCH'ed tensors to the launchers
// (at::Half -> __half, at::BFloat16 -> __nv_bfloat16; float, double as is).
// Included only by *_cuda_host.cpp files.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace visdet_ops {

template <typename T>
struct CudaTypeOf {
  using type = T;
};
template <>
struct CudaTypeOf<c10::Half> {
  using type = __half;
};
template <>
struct CudaTypeOf<c10::BFloat16> {
  using type = __nv_bfloat16;
};

template <typename T>
using cuda_t = typename CudaTypeOf<T>::type;

// t's data as the launchers' type; t must hold scalar_t (AT_DISPATCH'ed).
template <typename scalar_t>
const cuda_t<scalar_t>* cuda_data(const at::Tensor& t) {
  return reinterpret_cast<const cuda_t<scalar_t>*>(t.const_data_ptr<scalar_t>());
}
// As cuda_data, but nullptr for an undefined tensor (an optional input).
template <typename scalar_t>
const cuda_t<scalar_t>* cuda_data_or_null(const at::Tensor& t) {
  return t.defined() ? cuda_data<scalar_t>(t) : nullptr;
}
template <typename scalar_t>
cuda_t<scalar_t>* cuda_mutable_data(const at::Tensor& t) {
  return reinterpret_cast<cuda_t<scalar_t>*>(t.mutable_data_ptr<scalar_t>());
}

}  // namespace visdet_ops
