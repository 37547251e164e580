// The host adapter over the classic libtorch API (at::Tensor, TORCH_LIBRARY):
// the build for torch below the stable floor, one wheel per torch minor.
// Include common/host.h, not this file.
#pragma once

// One header per at:: function the adapter calls, not <ATen/ATen.h> (which
// declares every ATen function): 13-14 s -> 9 s per host file with torch
// 2.13's headers, in every classic build. An at:: function the adapter starts
// to call needs its ATen/ops/<name>.h here (torch 2.4, the floor, has these).
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/_unsafe_view.h>
#include <ATen/ops/add.h>
#include <ATen/ops/aminmax.h>
#include <ATen/ops/bmm.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/cumsum.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/full.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/nonzero.h>
#include <ATen/ops/pad.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/unique_consecutive.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <ostream>
#include <tuple>
#include <vector>

// The message is exactly the streamed parts (what TORCH_CHECK shows in Python).
#define VISDET_CHECK(cond, ...) TORCH_CHECK(cond, __VA_ARGS__)

#define VISDET_LIBRARY_FRAGMENT(m) TORCH_LIBRARY_FRAGMENT(visdet_ops, m)
#define VISDET_LIBRARY_IMPL(key, m) TORCH_LIBRARY_IMPL(visdet_ops, key, m)
#define VISDET_KERNEL(fn) TORCH_FN(fn)

namespace visdet_ops {
namespace host {

using Tensor = at::Tensor;
using ScalarType = c10::ScalarType;
using Sizes = std::initializer_list<int64_t>;

inline ScalarType dtype_of(const Tensor& t) { return t.scalar_type(); }
inline bool is_cpu(const Tensor& t) { return t.device().is_cpu(); }
inline bool is_cuda(const Tensor& t) { return t.is_cuda(); }
inline bool same_device(const Tensor& a, const Tensor& b) {
  return a.device() == b.device();
}
inline int32_t device_index(const Tensor& t) { return t.device().index(); }

// "cpu", "cuda:0": c10's own spelling.
inline c10::Device device_of(const Tensor& t) { return t.device(); }

inline Tensor empty(Sizes sizes, ScalarType dtype, const Tensor& like) {
  return at::empty(sizes, like.options().dtype(dtype));
}
inline Tensor zeros(Sizes sizes, ScalarType dtype, const Tensor& like) {
  return at::zeros(sizes, like.options().dtype(dtype));
}
inline Tensor empty_like(const Tensor& t) { return at::empty_like(t); }

inline Tensor to_dtype(const Tensor& t, ScalarType dtype) { return t.to(dtype); }
inline Tensor to_cpu(const Tensor& t) { return t.to(at::kCPU); }
inline Tensor contiguous(const Tensor& t) { return t.contiguous(); }

// The whole extent is t itself (the common one-chunk case of the chunked
// drivers: no slice / as_strided dispatch per call); else aten::narrow, with
// its own errors.
inline Tensor narrow(const Tensor& t, int64_t dim, int64_t start,
                     int64_t length) {
  if (start == 0 && t.dim() > 0 && dim >= -t.dim() && dim < t.dim() &&
      length == t.size(dim)) {
    return t;
  }
  return t.narrow(dim, start, length);
}
inline Tensor select(const Tensor& t, int64_t dim, int64_t index) {
  return t.select(dim, index);
}
inline Tensor index_select(const Tensor& t, int64_t dim, const Tensor& index) {
  return t.index_select(dim, index);
}
// The int64 permutation that sorts a 1-D tensor in descending order, equal
// values in index order.
inline Tensor sort_descending_stable_indices(const Tensor& t) {
  return std::get<1>(t.sort(/*stable=*/true, /*dim=*/0, /*descending=*/true));
}
inline Tensor masked_select(const Tensor& t, const Tensor& mask) {
  return t.masked_select(mask);
}
// A copy of self with self[index[i]] = source[i] along dim.
inline Tensor index_copy(const Tensor& self, int64_t dim, const Tensor& index,
                         const Tensor& source) {
  return self.index_copy(dim, index, source);
}

template <typename T>
const T* const_data(const Tensor& t) {
  return static_cast<const T*>(t.const_data_ptr());
}
template <typename T>
T* mutable_data(const Tensor& t) {
  return static_cast<T*>(t.mutable_data_ptr());
}

// The value of a one-element tensor of C++ type T (a device sync on CUDA).
template <typename T>
T read_scalar(const Tensor& t) {
  return *const_data<T>(to_cpu(t).contiguous());
}

template <typename F>
void parallel_for(int64_t begin, int64_t end, int64_t grain, const F& f) {
  at::parallel_for(begin, end, grain, f);
}

// --- bbox_overlaps, corner_pool, roi_align (port-a) -------------------------
// A string schema argument ("str mode") as a kernel parameter: c10::string_view
// is what the classic dispatcher unboxes on every torch of the classic matrix
// (std::string_view from 2.6 on, c10's own class before), with no copy and no
// leak (the stable build's StringArg says why it is a class of its own there).
using StringArg = c10::string_view;

// An uninitialised tensor of a run-time number of dimensions (bbox_overlaps'
// batch dimensions).
inline Tensor empty_of_sizes(const std::vector<int64_t>& sizes,
                             ScalarType dtype, const Tensor& like) {
  return at::empty(sizes, like.options().dtype(dtype));
}
// --- end bbox_overlaps, corner_pool, roi_align ------------------------------
// ---- masked_conv2d (csrc/ops/masked_conv) -------------------------------
// Views, the active positions and their row map, the GEMMs. The stable
// build calls the same ATen ops by name (host_stable.h).
inline Tensor view(const Tensor& t, Sizes sizes) { return t.view(sizes); }
inline Tensor reshape(const Tensor& t, Sizes sizes) { return t.reshape(sizes); }
// The reshape of a contiguous t that an op returns as its result: no view is
// recorded (at::_unsafe_view, what aten::matmul returns for the same reason).
// A view of the op's scratch would reach autograd as a view, and in-place ops
// on the output (an inplace ReLU after a DCN) would then raise.
inline Tensor reshape_result(const Tensor& t, Sizes sizes) {
  return at::_unsafe_view(t.contiguous(), sizes);
}
inline Tensor transpose(const Tensor& t, int64_t dim0, int64_t dim1) {
  return t.transpose(dim0, dim1);
}
inline Tensor expand(const Tensor& t, Sizes sizes) { return t.expand(sizes); }
// Bool, t > 0 elementwise.
inline Tensor greater_than_zero(const Tensor& t) { return t.gt(0); }
// The [K, dim] indices of the nonzero elements, in row-major order.
inline Tensor nonzero(const Tensor& t) { return at::nonzero(t); }
// Zero padding of the last dimensions ({before, after} per dimension, last first).
inline Tensor pad_zeros(const Tensor& t, Sizes pad) {
  return at::pad(t, pad, "constant", 0.0);
}
inline Tensor cumsum(const Tensor& t, int64_t dim, ScalarType dtype) {
  return at::cumsum(t, dim, dtype);
}
inline Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b) {
  return at::where(condition, a, b);
}
inline Tensor full(Sizes sizes, double value, ScalarType dtype,
                   const Tensor& like) {
  return at::full(sizes, value, like.options().dtype(dtype));
}
// input @ weight^T (+ bias): aten::linear, which is aten::addmm(bias, input,
// weight^T) for a 2-D input with a bias and aten::mm without one.
inline Tensor linear(const Tensor& input, const Tensor& weight,
                     const std::optional<Tensor>& bias) {
  return at::linear(input, weight, bias);
}
inline Tensor mm(const Tensor& a, const Tensor& b) { return at::mm(a, b); }
inline Tensor sum(const Tensor& t, Sizes dims,
                  std::optional<ScalarType> dtype = std::nullopt) {
  return at::sum(t, dims, /*keepdim=*/false, dtype);
}
// --- focal_loss (port-c) ------------------------------------------------------
// (StringArg: port-a's alias above.)

// Fills t with value in place and returns it.
inline Tensor fill(const Tensor& t, double value) {
  Tensor self = t;
  return self.fill_(value);
}
// The sum of every element of t: a 0-d tensor of t's dtype.
inline Tensor sum_all(const Tensor& t) { return t.sum(); }
// The smallest and largest element of t (0-d tensors of t's dtype).
inline std::tuple<Tensor, Tensor> aminmax(const Tensor& t) {
  return at::aminmax(t);
}
// --- end focal_loss -----------------------------------------------------------

// --- multi_scale_deform_attn (port-c) -----------------------------------------
// t as one dimension (a view where possible, as reshape({-1})).
inline Tensor flatten(const Tensor& t) { return t.flatten(); }
// The tensors joined along dimension 0 (same dtype and device).
inline Tensor cat(const std::vector<Tensor>& tensors) {
  return at::cat(tensors, 0);
}
// t on the device of like (t itself when it is there already); non_blocking:
// a CPU -> GPU copy does not wait for the stream.
inline Tensor to_device(const Tensor& t, const Tensor& like,
                        bool non_blocking) {
  return t.to(like.device(), t.scalar_type(), non_blocking);
}
// --- end multi_scale_deform_attn -----------------------------------------------

// --- soft_nms (port-c) ---------------------------------------------------------
// An uninitialised CPU tensor (host-side tables such as soft_nms' segment
// offsets, whatever the device of the op's inputs).
inline Tensor empty_cpu(Sizes sizes, ScalarType dtype) {
  return at::empty(sizes, at::TensorOptions().dtype(dtype));
}
// A stable sort of a 1-D tensor: (values, int64 indices); equal values keep
// index order.
inline std::tuple<Tensor, Tensor> sort_stable(const Tensor& t,
                                              bool descending) {
  return t.sort(/*stable=*/true, /*dim=*/0, descending);
}
// The length of each run of equal consecutive values of a 1-D tensor.
inline Tensor unique_consecutive_counts(const Tensor& t) {
  return std::get<2>(at::unique_consecutive(t, /*return_inverse=*/false,
                                            /*return_counts=*/true));
}
// --- end soft_nms --------------------------------------------------------------

// ---- deform_conv2d (csrc/ops/deform_conv) -------------------------------
// The grouped GEMMs, the bias and the chunk copies.
inline Tensor bmm(const Tensor& a, const Tensor& b) { return at::bmm(a, b); }
// a + b (broadcasting), a new tensor.
inline Tensor add(const Tensor& a, const Tensor& b) { return at::add(a, b); }
// dst = src (broadcasting src), in place.
inline void copy_into(const Tensor& dst, const Tensor& src) {
  Tensor d = dst;
  d.copy_(src);
}
inline void zero_fill(const Tensor& t) {
  Tensor d = t;
  d.zero_();
}

}  // namespace host
}  // namespace visdet_ops
