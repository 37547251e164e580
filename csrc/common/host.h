// The host adapter: the one API that an op's host code (schema, checks,
// prepared arguments, allocation, dtype dispatch, registration) is written
// against, so that ONE source builds two ways:
//
//   classic build  (default)            host::Tensor = at::Tensor, TORCH_LIBRARY,
//                                       TORCH_CHECK: a wheel per torch minor;
//   stable build   (VISDET_OPS_STABLE_ABI, set by setup.py together with
//                   TORCH_TARGET_VERSION = the stable floor)
//                                       host::Tensor = torch::stable::Tensor,
//                                       STABLE_TORCH_LIBRARY, the LibTorch stable
//                                       C shim only: one wheel per CUDA major for
//                                       every torch >= the floor.
//
// What the adapter offers (both builds, same names, same messages):
//   host::Tensor, host::ScalarType (c10::ScalarType: header-only in both)
//   queries      dim, size, numel, dtype_of, is_cpu, is_cuda, same_device,
//                device_index, is_floating, is_integer
//   messages     shape_of(t) ("[12, 4]"), device_of(t) ("cpu", "cuda:0"), and
//                ScalarType streams as c10 prints it ("Float")
//   checks       VISDET_CHECK(cond, streamed message parts...): the message is
//                exactly the parts, in both builds
//   allocation   empty, zeros, full (on the device of a `like` tensor), empty_like,
//                empty_cpu, empty_of_sizes
//   conversion   to_dtype, to_cpu, to_device, contiguous
//   views        narrow, select, view, reshape, expand, flatten, transpose
//   ops          index_select, index_copy, masked_select, nonzero, where, cat,
//                pad_zeros, fill, zero_fill, copy_into, add, sum, sum_all,
//                cumsum, aminmax, greater_than_zero, mm, bmm, linear,
//                sort_stable, sort_descending_stable_indices,
//                unique_consecutive_counts, read_scalar<T> (a sync on CUDA)
//   data         const_data<T>(t), mutable_data<T>(t): T is the kernels'
//                torch-free storage type (float, HostHalf, __half, ...)
//   dispatch     dispatch_floating_types<HalfT, BFloat16T>(dtype, op, f):
//                calls f(type_tag<T>{}) with T the storage type of dtype
//   threads      parallel_for(begin, end, grain, f)
//   registration VISDET_LIBRARY_FRAGMENT(m) { m.def("schema"); }
//                VISDET_LIBRARY_IMPL(CPU, m) { m.impl("op", VISDET_KERNEL(fn)); }
//                VISDET_IMPL_WITH_BACKWARD(CPU, op, forward_fn, backward_fn)
//   devices      CpuDeviceGuard (nothing to switch: the CPU's counterpart of
//                the CUDA guard, for host code that both devices share)
//   CUDA         common/host_cuda.h: device guard, current stream, error check
//
// What neither build does in C++ any more (the stable ABI has no API for it,
// and one source means both builds do it the same way): autograd, autocast and
// the determinism alert live in the op's Python module (docs/stable-abi.md).
#pragma once

#include <cstdint>
#include <ostream>
#include <vector>

#if defined(VISDET_OPS_STABLE_ABI)
#include "common/host_stable.h"
#else
#include "common/host_classic.h"
#endif

// An op and its backward op for one dispatch key. The backward is always
// `_<op>_backward` (the name visdet_ops/ops/_registration.py looks up), so the
// rule is written here once rather than in each op's two host files. Each use
// is its own registration block: two in one file are two blocks.
#define VISDET_IMPL_WITH_BACKWARD(key, op, forward, backward) \
  VISDET_LIBRARY_IMPL(key, m) {                               \
    m.impl(#op, VISDET_KERNEL(forward));                      \
    m.impl("_" #op "_backward", VISDET_KERNEL(backward));     \
  }

namespace visdet_ops {
namespace host {

// The CPU's counterpart of CudaDeviceGuard (common/host_cuda.h): there is no
// current CPU device to switch. Host code that the CPU and CUDA share (a
// template on the device in an op's <op>.h) takes the device's guard as a
// type and makes one where the CUDA side makes its guard.
class CpuDeviceGuard {
 public:
  explicit CpuDeviceGuard(const Tensor&) {}
};

// A type carried into a dispatch lambda: f(type_tag<float>{}) lets the lambda
// name the type (using T = typename decltype(tag)::type) in C++17.
template <typename T>
struct type_tag {
  using type = T;
};

// dtype -> the kernels' storage type: float, double, and HalfT / BFloat16T for
// the 16-bit types (HostHalf / HostBFloat16 in CPU code, __half /
// __nv_bfloat16 in CUDA host code). Anything else is an error naming op.
template <typename HalfT, typename BFloat16T, typename F>
void dispatch_floating_types(ScalarType dtype, const char* op, F&& f) {
  switch (dtype) {
    case ScalarType::Float:
      f(type_tag<float>{});
      return;
    case ScalarType::Double:
      f(type_tag<double>{});
      return;
    case ScalarType::Half:
      f(type_tag<HalfT>{});
      return;
    case ScalarType::BFloat16:
      f(type_tag<BFloat16T>{});
      return;
    default:
      VISDET_CHECK(false, op, ": no kernel for dtype ", dtype);
  }
}

// float32 and float64 only (kernels without a 16-bit instantiation).
template <typename F>
void dispatch_float_double(ScalarType dtype, const char* op, F&& f) {
  switch (dtype) {
    case ScalarType::Float:
      f(type_tag<float>{});
      return;
    case ScalarType::Double:
      f(type_tag<double>{});
      return;
    default:
      VISDET_CHECK(false, op, ": no kernel for dtype ", dtype);
  }
}

// The one "16-bit computes in float32" rule of the ops: float16 and bfloat16
// are storage types whose arithmetic (accumulations, sample positions, RoI
// coordinates, GEMM columns) is float32; float32 and float64 compute in
// themselves (at::opmath_type's rule).
inline bool is_reduced_float(ScalarType t) {
  return t == ScalarType::Half || t == ScalarType::BFloat16;
}

inline ScalarType compute_dtype(ScalarType t) {
  return is_reduced_float(t) ? ScalarType::Float : t;
}

inline bool is_floating(ScalarType t) {
  return t == ScalarType::Float || t == ScalarType::Double ||
         t == ScalarType::Half || t == ScalarType::BFloat16;
}

// Any integer dtype (bool excluded).
inline bool is_integer(ScalarType t) {
  switch (t) {
    case ScalarType::Byte:
    case ScalarType::Char:
    case ScalarType::Short:
    case ScalarType::Int:
    case ScalarType::Long:
    case ScalarType::UInt16:
    case ScalarType::UInt32:
    case ScalarType::UInt64:
      return true;
    default:
      return false;
  }
}

// A tensor's shape as c10 prints an IntArrayRef: "[12, 4]", "[]".
struct ShapeText {
  std::vector<int64_t> sizes;
};
inline std::ostream& operator<<(std::ostream& out, const ShapeText& s) {
  out << '[';
  for (size_t i = 0; i < s.sizes.size(); ++i) {
    out << (i ? ", " : "") << s.sizes[i];
  }
  return out << ']';
}
inline ShapeText shape_of(const Tensor& t) {
  ShapeText s;
  for (int64_t d = 0; d < t.dim(); ++d) s.sizes.push_back(t.size(d));
  return s;
}
inline bool same_shape(const Tensor& a, const Tensor& b) {
  if (a.dim() != b.dim()) return false;
  for (int64_t d = 0; d < a.dim(); ++d) {
    if (a.size(d) != b.size(d)) return false;
  }
  return true;
}

}  // namespace host
}  // namespace visdet_ops
