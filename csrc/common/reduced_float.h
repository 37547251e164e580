// float16/bfloat16 on the CPU. Most CPU kernels are instantiated for float32
// and float64: a CPU op given a 16-bit float tensor computes through float32
// copies (as the CUDA kernels, in float32) and rounds each result once, to the
// dtype it returns. The CPU kernels of roi_align, roi_pool, deform_roi_pool,
// carafe and multi_scale_deformable_attn read 16-bit data directly (HostHalf /
// HostBFloat16 in scalar.h, host_t below). Torch-facing, host layer only.
#pragma once

#include <ATen/ATen.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <optional>

#include "common/scalar.h"

namespace visdet_ops {

// Kernels that read 16-bit tensors directly: the torch-free CPU
// storage type of an AT_DISPATCH'ed scalar_t (c10::Half -> HostHalf,
// c10::BFloat16 -> HostBFloat16; float, double as is), and t's data as it.
template <typename T>
struct HostTypeOf {
  using type = T;
};
template <>
struct HostTypeOf<c10::Half> {
  using type = HostHalf;
};
template <>
struct HostTypeOf<c10::BFloat16> {
  using type = HostBFloat16;
};
template <typename T>
using host_t = typename HostTypeOf<T>::type;

template <typename scalar_t>
const host_t<scalar_t>* host_data(const at::Tensor& t) {
  return reinterpret_cast<const host_t<scalar_t>*>(t.const_data_ptr<scalar_t>());
}
template <typename scalar_t>
host_t<scalar_t>* host_mutable_data(const at::Tensor& t) {
  return reinterpret_cast<host_t<scalar_t>*>(t.mutable_data_ptr<scalar_t>());
}

inline bool is_reduced_float(const at::Tensor& t) {
  return t.defined() &&
         (t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16);
}

inline bool is_reduced_float(const std::optional<at::Tensor>& t) {
  return t.has_value() && is_reduced_float(*t);
}

// t in float32 if it is a 16-bit float, else t itself (undefined stays so).
inline at::Tensor float_if_reduced(const at::Tensor& t) {
  return is_reduced_float(t) ? t.to(at::kFloat) : t;
}

inline std::optional<at::Tensor> float_if_reduced(
    const std::optional<at::Tensor>& t) {
  if (!t.has_value()) return t;
  return float_if_reduced(*t);
}

// A result computed in float32, returned in the dtype of the argument it
// belongs to (its gradient, or the output of a 16-bit input).
inline at::Tensor to_dtype_of(const at::Tensor& result, const at::Tensor& like) {
  if (!result.defined() || !like.defined() ||
      result.scalar_type() == like.scalar_type()) {
    return result;
  }
  return result.to(like.scalar_type());
}

inline at::Tensor to_dtype_of(const at::Tensor& result,
                              const std::optional<at::Tensor>& like) {
  return like.has_value() ? to_dtype_of(result, *like) : result;
}

}  // namespace visdet_ops
