// float16/bfloat16 on the CPU. The CPU kernels are instantiated for float32
// and float64; a CPU op given a 16-bit float tensor computes in float32 (as the
// CUDA kernels do: they load 16-bit values and compute in float32) and rounds
// each result once, to the dtype it returns. Torch-facing, host layer only.
#pragma once

#include <ATen/ATen.h>

#include <optional>

namespace visdet_ops {

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
