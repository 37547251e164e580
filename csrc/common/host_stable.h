// The host adapter over the LibTorch stable ABI (torch::stable::Tensor,
// STABLE_TORCH_LIBRARY, the C shim): one wheel per CUDA major for every torch
// >= the floor that setup.py passes as TORCH_TARGET_VERSION. Only what that
// floor offers may be used here: every torch::stable function below is
// available since 2.10 (ops.h marks each with its minimum version). Include
// common/host.h, not this file.
//
// ATen ops without a torch::stable wrapper (sort, index_select, masked_select,
// index_copy) are called through the dispatcher by name
// (torch_call_dispatcher), as torchvision's StableABICompat.h does; the stable
// calls take no Scalar, SymInt, Generator or Stream arguments.
#pragma once

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>

#include <array>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#if !defined(TORCH_TARGET_VERSION)
#error "the stable build needs TORCH_TARGET_VERSION (setup.py sets it to the stable floor)"
#endif

namespace visdet_ops {
namespace host {
namespace detail {

// Throws the streamed parts as the message, nothing else: STD_TORCH_CHECK
// would prefix the C++ function, file and line, and the tests (and users)
// match the same text as the classic build's TORCH_CHECK gives. torch turns
// the std::runtime_error into a Python RuntimeError.
template <typename... Args>
[[noreturn]] void fail(const Args&... args) {
  std::ostringstream message;
  (message << ... << args);
  throw std::runtime_error(message.str());
}

}  // namespace detail
}  // namespace host
}  // namespace visdet_ops

#define VISDET_CHECK(cond, ...)                                  \
  do {                                                           \
    if (!(cond)) ::visdet_ops::host::detail::fail(__VA_ARGS__);  \
  } while (0)

#define VISDET_LIBRARY_FRAGMENT(m) STABLE_TORCH_LIBRARY_FRAGMENT(visdet_ops, m)
#define VISDET_LIBRARY_IMPL(key, m) STABLE_TORCH_LIBRARY_IMPL(visdet_ops, key, m)
#define VISDET_KERNEL(fn) TORCH_BOX(&fn)

namespace visdet_ops {
namespace host {

using Tensor = torch::stable::Tensor;
using ScalarType = torch::headeronly::ScalarType;  // c10::ScalarType, header-only
using Sizes = std::initializer_list<int64_t>;

inline ScalarType dtype_of(const Tensor& t) { return t.scalar_type(); }
inline bool is_cpu(const Tensor& t) { return t.is_cpu(); }
inline bool is_cuda(const Tensor& t) { return t.is_cuda(); }
inline int32_t device_index(const Tensor& t) { return t.get_device_index(); }
inline bool same_device(const Tensor& a, const Tensor& b) {
  return a.device() == b.device();
}

// "cpu", "cuda:0": the spelling of c10::Device's operator<<.
struct DeviceText {
  torch::stable::Device device;
};
inline std::ostream& operator<<(std::ostream& out, const DeviceText& d) {
  switch (d.device.type()) {
    case torch::headeronly::DeviceType::CPU:
      out << "cpu";
      break;
    case torch::headeronly::DeviceType::CUDA:
      out << "cuda";
      break;
    case torch::headeronly::DeviceType::Meta:
      out << "meta";
      break;
    default:
      out << "device_type_" << static_cast<int>(d.device.type());
  }
  if (d.device.has_index()) out << ':' << static_cast<int>(d.device.index());
  return out;
}
inline DeviceText device_of(const Tensor& t) { return DeviceText{t.device()}; }

namespace detail {

// A new uninitialised contiguous tensor: aoti_torch_empty_strided, one
// direct shim call (at::empty_strided, the op at::empty runs). Not the
// floor's torch::stable::new_empty / new_zeros / empty: those box their
// arguments and call the dispatcher by op name (a schema lookup per call),
// and new_empty then dispatches again to aten::empty. That cost about 6,000
// instructions per allocation against at::empty's 1,000 (callgrind, a
// corner_pool call on CPU), and the host layers allocate every output.
// Strides as at::empty gives them (a size-0 or size-1 dimension counts as 1).
inline void contiguous_strides(const int64_t* sizes, size_t ndim,
                               int64_t* strides) {
  int64_t stride = 1;
  for (size_t i = ndim; i-- > 0;) {
    strides[i] = stride;
    stride *= sizes[i] > 1 ? sizes[i] : 1;
  }
}

inline Tensor new_contiguous(const int64_t* sizes, size_t ndim,
                             ScalarType dtype, int32_t device_type,
                             int32_t device_index) {
  constexpr size_t kInline = 8;
  std::array<int64_t, kInline> inline_strides{};
  std::vector<int64_t> heap_strides;
  int64_t* strides = inline_strides.data();
  if (ndim > kInline) {
    heap_strides.resize(ndim);
    strides = heap_strides.data();
  }
  contiguous_strides(sizes, ndim, strides);
  const int32_t code =
      torch::stable::detail::to<int32_t>(torch::stable::detail::from(dtype));
  AtenTensorHandle handle = nullptr;
  TORCH_ERROR_CODE_CHECK(aoti_torch_empty_strided(
      static_cast<int64_t>(ndim), sizes, strides, code, device_type,
      device_index, &handle));
  return Tensor(handle);
}

// The same, on the device of like.
inline Tensor new_contiguous_like(const int64_t* sizes, size_t ndim,
                                  ScalarType dtype, const Tensor& like) {
  int32_t device_type = 0;
  int32_t device_index = 0;
  TORCH_ERROR_CODE_CHECK(aoti_torch_get_device_type(like.get(), &device_type));
  TORCH_ERROR_CODE_CHECK(
      aoti_torch_get_device_index(like.get(), &device_index));
  return new_contiguous(sizes, ndim, dtype, device_type, device_index);
}

}  // namespace detail

inline Tensor empty(Sizes sizes, ScalarType dtype, const Tensor& like) {
  return detail::new_contiguous_like(sizes.begin(), sizes.size(), dtype, like);
}
// t = 0 in place (aoti_torch_zero_: at::zero_, not a boxed call by name).
inline void zero_fill(const Tensor& t) {
  TORCH_ERROR_CODE_CHECK(aoti_torch_zero_(t.get()));
}
inline Tensor zeros(Sizes sizes, ScalarType dtype, const Tensor& like) {
  Tensor t = empty(sizes, dtype, like);
  zero_fill(t);
  return t;
}
inline Tensor empty_like(const Tensor& t) { return torch::stable::empty_like(t); }

// to_dtype and contiguous return t itself when there is nothing to do, as
// at::Tensor's do, but without a boxed dispatcher call to find that out: a
// shim query costs a fraction of one, and the host layers call these on
// every input.
inline Tensor to_dtype(const Tensor& t, ScalarType dtype) {
  if (t.scalar_type() == dtype) return t;
  return torch::stable::to(t, std::optional<ScalarType>(dtype));
}
inline Tensor to_cpu(const Tensor& t) {
  if (t.is_cpu()) return t;
  return torch::stable::to(t, torch::stable::Device(torch::headeronly::DeviceType::CPU));
}
inline Tensor contiguous(const Tensor& t) {
  if (t.is_contiguous()) return t;
  return torch::stable::contiguous(t);
}

namespace detail {

// Views without the dispatcher. The floor's torch::stable::view, transpose
// and select (and copy_) box their arguments and call the dispatcher by op
// name, a schema lookup per call; the deform_conv host loop makes dozens of
// such calls per step. aoti_torch__reinterpret_tensor makes the same view
// (t's storage, the given sizes and strides, t's offset plus an increment)
// in one direct shim call. The views stay inside the host layers: the
// kernels run below autograd, so no view tracking is lost.
inline Tensor reinterpret(const Tensor& t, const int64_t* sizes,
                          const int64_t* strides, size_t ndim,
                          int64_t offset_increment) {
  AtenTensorHandle handle = nullptr;
  TORCH_ERROR_CODE_CHECK(aoti_torch__reinterpret_tensor(
      t.get(), static_cast<int64_t>(ndim), sizes, strides, offset_increment,
      &handle));
  return Tensor(handle);
}

inline int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  const int64_t wrapped = dim < 0 ? dim + ndim : dim;
  VISDET_CHECK(wrapped >= 0 && wrapped < ndim, "visdet_ops: ", op,
               ": dimension ", dim, " out of range for a ", ndim,
               "-d tensor");
  return wrapped;
}

// t's sizes and strides, copied (the shim's pointers are borrowed).
struct Geometry {
  std::vector<int64_t> sizes, strides;
  explicit Geometry(const Tensor& t) {
    const auto s = t.sizes();
    const auto st = t.strides();
    sizes.assign(s.begin(), s.end());
    strides.assign(st.begin(), st.end());
  }
  Tensor of(const Tensor& t, int64_t offset_increment) const {
    return reinterpret(t, sizes.data(), strides.data(), sizes.size(),
                       offset_increment);
  }
};

}  // namespace detail

inline Tensor select(const Tensor& t, int64_t dim, int64_t index) {
  detail::Geometry g(t);
  const int64_t d =
      detail::wrap_dim(dim, static_cast<int64_t>(g.sizes.size()), "select");
  const int64_t size = g.sizes[d];
  VISDET_CHECK(index >= -size && index < size, "visdet_ops: select: index ",
               index, " out of range for size ", size);
  const int64_t offset = (index < 0 ? index + size : index) * g.strides[d];
  g.sizes.erase(g.sizes.begin() + d);
  g.strides.erase(g.strides.begin() + d);
  return g.of(t, offset);
}

// narrow within range is a view (t's storage from start along dim): one
// direct shim call; the whole extent is t itself. Out of range, or a negative
// start, goes to aten::narrow and its own error.
inline Tensor narrow(const Tensor& t, int64_t dim, int64_t start,
                     int64_t length) {
  detail::Geometry g(t);
  const auto ndim = static_cast<int64_t>(g.sizes.size());
  if (ndim > 0) {
    const int64_t d = dim < 0 ? dim + ndim : dim;
    if (d >= 0 && d < ndim && start >= 0 && length >= 0 &&
        start <= g.sizes[d] && length <= g.sizes[d] - start) {
      if (start == 0 && length == g.sizes[d]) return t;
      g.sizes[d] = length;
      return g.of(t, start * g.strides[d]);
    }
  }
  Tensor self = t;  // torch::stable::narrow takes a non-const reference
  return torch::stable::narrow(self, dim, start, length);
}

namespace detail {

// Calls aten::<name>.<overload> with the stack's arguments; results replace
// them from stack[0] on (the stack must be as long as the longer of the two).
template <size_t N>
void call_aten(const char* name, const char* overload,
               std::array<StableIValue, N>& stack) {
  // TORCH_ERROR_CODE_CHECK, not STABLE_TORCH_ERROR_CODE_CHECK: the floor's
  // (2.11) headers have only the former; the build must compile against them.
  TORCH_ERROR_CODE_CHECK(
      torch_call_dispatcher(name, overload, stack.data(), TORCH_ABI_VERSION));
}

template <typename T>
StableIValue box(const T& value) {
  return torch::stable::detail::from(value);
}
inline Tensor unbox_tensor(StableIValue value) {
  return torch::stable::detail::to<Tensor>(value);
}

}  // namespace detail

// aten::index_select(Tensor self, int dim, Tensor index) -> Tensor
inline Tensor index_select(const Tensor& t, int64_t dim, const Tensor& index) {
  std::array<StableIValue, 3> stack{detail::box(t), detail::box(dim),
                                    detail::box(index)};
  detail::call_aten("aten::index_select", "", stack);
  return detail::unbox_tensor(stack[0]);
}

// aten::sort.stable(Tensor self, *, bool? stable, int dim=-1,
//                   bool descending=False) -> (Tensor values, Tensor indices)
inline Tensor sort_descending_stable_indices(const Tensor& t) {
  std::array<StableIValue, 4> stack{
      detail::box(t), detail::box(std::optional<bool>(true)),
      detail::box(int64_t{0}), detail::box(true)};
  detail::call_aten("aten::sort", "stable", stack);
  (void)detail::unbox_tensor(stack[0]);  // the values: owned here, so freed
  return detail::unbox_tensor(stack[1]);
}

// aten::masked_select(Tensor self, Tensor mask) -> Tensor
inline Tensor masked_select(const Tensor& t, const Tensor& mask) {
  std::array<StableIValue, 2> stack{detail::box(t), detail::box(mask)};
  detail::call_aten("aten::masked_select", "", stack);
  return detail::unbox_tensor(stack[0]);
}

// aten::index_copy(Tensor self, int dim, Tensor index, Tensor source) -> Tensor
inline Tensor index_copy(const Tensor& self, int64_t dim, const Tensor& index,
                         const Tensor& source) {
  std::array<StableIValue, 4> stack{detail::box(self), detail::box(dim),
                                    detail::box(index), detail::box(source)};
  detail::call_aten("aten::index_copy", "", stack);
  return detail::unbox_tensor(stack[0]);
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
  return *host::const_data<T>(host::contiguous(host::to_cpu(t)));
}

// at::parallel_for through the shim (torch's own thread pool and grain rule).
template <typename F>
void parallel_for(int64_t begin, int64_t end, int64_t grain, const F& f) {
  torch::stable::parallel_for(begin, end, grain, f);
}

// --- bbox_overlaps, corner_pool, roi_align (port-a) -------------------------
// A string schema argument ("str mode") as a kernel parameter: the string,
// owned, unboxed by the ToImpl specialization at the end of this file.
//
// Not std::string_view, which TORCH_BOX unboxes through the headers'
// ToImpl<std::string>: up to the 2.13 headers that copies the string into a
// `new std::string`, returns a copy of it and never frees it
// (pytorch/pytorch#191340, fixed in the 2.14 headers by #190493, not
// backported). The conversion is header code compiled into this extension,
// so every call of an op with a str argument leaked 48-160 bytes on every
// torch >= the floor. Our own conversion uses the same shim functions
// (torch_string_length, torch_string_c_str, torch_delete_string: all in the
// floor's shim) and frees the handle, as the fixed header does.
class StringArg {
 public:
  explicit StringArg(std::string value) : value_(std::move(value)) {}
  operator std::string_view() const noexcept { return value_; }
  friend bool operator==(const StringArg& a, std::string_view b) noexcept {
    return std::string_view(a.value_) == b;
  }

 private:
  std::string value_;
};

// An uninitialised tensor of a run-time number of dimensions (bbox_overlaps'
// batch dimensions).
inline Tensor empty_of_sizes(const std::vector<int64_t>& sizes,
                             ScalarType dtype, const Tensor& like) {
  return detail::new_contiguous_like(sizes.data(), sizes.size(), dtype, like);
}
// --- end bbox_overlaps, corner_pool, roi_align ------------------------------
// ---- masked_conv2d (csrc/ops/masked_conv) -------------------------------
// Views, the active positions and their row map, the GEMMs (host_classic.h
// has the at:: calls). Functional overloads without Scalar arguments only:
// gt against a 0-d CPU tensor, aten::linear for addmm(bias, input, weight^T).
// A view of a contiguous t with the given sizes (no -1) through one direct
// shim call; anything else (a strided t, an inferred size) through
// aten::view, which also raises its own errors.
inline Tensor view(const Tensor& t, Sizes sizes) {
  int64_t numel = 1;
  bool explicit_sizes = true;
  for (const int64_t s : sizes) {
    explicit_sizes = explicit_sizes && s >= 0;
    numel *= s;
  }
  if (!explicit_sizes || !t.is_contiguous() || numel != t.numel()) {
    return torch::stable::view(t, sizes);
  }
  std::vector<int64_t> strides(sizes.size());
  detail::contiguous_strides(sizes.begin(), sizes.size(), strides.data());
  return detail::reinterpret(t, sizes.begin(), strides.data(), sizes.size(),
                             0);
}
// reshape of a contiguous t is its view (what aten::reshape returns too, with
// the same errors); view makes it without the dispatcher where it can.
inline Tensor reshape(const Tensor& t, Sizes sizes) {
  if (t.is_contiguous()) return view(t, sizes);
  return torch::stable::reshape(t, sizes);
}
// The reshape of a contiguous t that an op returns as its result (host_classic.h
// says why): aoti_torch__reinterpret_tensor shares t's storage and records no
// view, whatever the sizes.
inline Tensor reshape_result(const Tensor& t, Sizes sizes) {
  const Tensor c = host::contiguous(t);
  int64_t numel = 1;
  for (const int64_t s : sizes) {
    VISDET_CHECK(s >= 0, "visdet_ops: reshape_result: negative size ", s);
    numel *= s;
  }
  VISDET_CHECK(numel == c.numel(), "visdet_ops: reshape_result: ", numel,
               " elements asked of a tensor of ", c.numel());
  std::vector<int64_t> strides(sizes.size());
  detail::contiguous_strides(sizes.begin(), sizes.size(), strides.data());
  return detail::reinterpret(c, sizes.begin(), strides.data(), sizes.size(),
                             0);
}
inline Tensor transpose(const Tensor& t, int64_t dim0, int64_t dim1) {
  detail::Geometry g(t);
  const auto ndim = static_cast<int64_t>(g.sizes.size());
  const int64_t a = detail::wrap_dim(dim0, ndim, "transpose");
  const int64_t b = detail::wrap_dim(dim1, ndim, "transpose");
  std::swap(g.sizes[a], g.sizes[b]);
  std::swap(g.strides[a], g.strides[b]);
  return g.of(t, 0);
}
// aten::expand(Tensor(a) self, SymInt[] size, *, bool implicit=False). The
// plain case (as many sizes as dims, each t's own, -1, or a new size of a dim
// of 1) is the view with stride 0 on the grown dims, made directly; anything
// else goes to aten::expand and its own errors.
inline Tensor expand(const Tensor& t, Sizes sizes) {
  detail::Geometry g(t);
  bool plain = sizes.size() == g.sizes.size();
  size_t i = 0;
  for (const int64_t s : sizes) {
    if (!plain) break;
    if (s != -1 && s != g.sizes[i]) {
      plain = g.sizes[i] == 1 && s >= 0;
      g.sizes[i] = s;
      g.strides[i] = 0;
    }
    ++i;
  }
  if (plain) return g.of(t, 0);
  std::array<StableIValue, 3> stack{
      detail::box(t),
      detail::box(torch::headeronly::IntHeaderOnlyArrayRef(sizes)),
      detail::box(false)};
  detail::call_aten("aten::expand", "", stack);
  return detail::unbox_tensor(stack[0]);
}
// aten::gt.Tensor(Tensor self, Tensor other) with other a 0-d CPU zero of
// t's dtype (a CPU scalar operand, as gt.Scalar's 0 is).
inline Tensor greater_than_zero(const Tensor& t) {
  // The 0-d zero by two direct shim calls (torch::stable::full is a boxed one).
  const int64_t no_sizes[1] = {0};
  const Tensor zero = detail::new_contiguous(
      no_sizes, 0, t.scalar_type(), aoti_torch_device_type_cpu(), -1);
  zero_fill(zero);
  std::array<StableIValue, 2> stack{detail::box(t), detail::box(zero)};
  detail::call_aten("aten::gt", "Tensor", stack);
  return detail::unbox_tensor(stack[0]);
}
// aten::nonzero(Tensor self) -> Tensor
inline Tensor nonzero(const Tensor& t) {
  std::array<StableIValue, 1> stack{detail::box(t)};
  detail::call_aten("aten::nonzero", "", stack);
  return detail::unbox_tensor(stack[0]);
}
inline Tensor pad_zeros(const Tensor& t, Sizes pad) {
  return torch::stable::pad(t, pad, "constant", 0.0);
}
// aten::cumsum(Tensor self, int dim, *, ScalarType? dtype=None) -> Tensor
inline Tensor cumsum(const Tensor& t, int64_t dim, ScalarType dtype) {
  std::array<StableIValue, 3> stack{
      detail::box(t), detail::box(dim),
      detail::box(std::optional<ScalarType>(dtype))};
  detail::call_aten("aten::cumsum", "", stack);
  return detail::unbox_tensor(stack[0]);
}
// aten::where.self(Tensor condition, Tensor self, Tensor other) -> Tensor
inline Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b) {
  std::array<StableIValue, 3> stack{detail::box(condition), detail::box(a),
                                    detail::box(b)};
  detail::call_aten("aten::where", "self", stack);
  return detail::unbox_tensor(stack[0]);
}
inline Tensor full(Sizes sizes, double value, ScalarType dtype,
                   const Tensor& like) {
  return torch::stable::full(sizes, value, dtype, std::nullopt, like.device());
}
// aten::linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor:
// addmm(bias, input, weight^T) for a 2-D input with a bias, mm without.
inline Tensor linear(const Tensor& input, const Tensor& weight,
                     const std::optional<Tensor>& bias) {
  std::array<StableIValue, 3> stack{detail::box(input), detail::box(weight),
                                    detail::box(bias)};
  detail::call_aten("aten::linear", "", stack);
  return detail::unbox_tensor(stack[0]);
}
// aten::mm(Tensor self, Tensor mat2) -> Tensor
inline Tensor mm(const Tensor& a, const Tensor& b) {
  std::array<StableIValue, 2> stack{detail::box(a), detail::box(b)};
  detail::call_aten("aten::mm", "", stack);
  return detail::unbox_tensor(stack[0]);
}
inline Tensor sum(const Tensor& t, Sizes dims,
                  std::optional<ScalarType> dtype = std::nullopt) {
  return torch::stable::sum(
      t, std::optional<torch::headeronly::IntHeaderOnlyArrayRef>(dims),
      /*keepdim=*/false, dtype);
}
// --- focal_loss (port-c) ------------------------------------------------------
// (StringArg: port-a's type above.)

// Fills t with value in place and returns it.
inline Tensor fill(const Tensor& t, double value) {
  return torch::stable::fill_(t, value);
}
// The sum of every element of t: a 0-d tensor of t's dtype.
inline Tensor sum_all(const Tensor& t) { return torch::stable::sum(t); }
// aten::aminmax(Tensor self, *, int? dim=None, bool keepdim=False)
//   -> (Tensor min, Tensor max)
inline std::tuple<Tensor, Tensor> aminmax(const Tensor& t) {
  std::array<StableIValue, 3> stack{detail::box(t),
                                    detail::box(std::optional<int64_t>()),
                                    detail::box(false)};
  detail::call_aten("aten::aminmax", "", stack);
  return {detail::unbox_tensor(stack[0]), detail::unbox_tensor(stack[1])};
}
// --- end focal_loss -----------------------------------------------------------

// --- multi_scale_deform_attn (port-c) -----------------------------------------
// t as one dimension (a view where possible, as reshape({-1})).
inline Tensor flatten(const Tensor& t) {
  if (t.is_contiguous() && t.dim() > 0) return view(t, {t.numel()});
  return torch::stable::flatten(t);
}
// aten::cat(Tensor[] tensors, int dim=0) -> Tensor
inline Tensor cat(const std::vector<Tensor>& tensors) {
  std::array<StableIValue, 2> stack{detail::box(tensors),
                                    detail::box(int64_t{0})};
  detail::call_aten("aten::cat", "", stack);
  return detail::unbox_tensor(stack[0]);
}
// t on the device of like (t itself when it is there already); non_blocking:
// a CPU -> GPU copy does not wait for the stream.
inline Tensor to_device(const Tensor& t, const Tensor& like,
                        bool non_blocking) {
  if (same_device(t, like)) return t;  // a shim query, not a boxed call
  return torch::stable::to(t, like.device(), non_blocking);
}
// --- end multi_scale_deform_attn -----------------------------------------------

// --- soft_nms (port-c) ---------------------------------------------------------
// An uninitialised CPU tensor (host-side tables such as soft_nms' segment
// offsets, whatever the device of the op's inputs).
inline Tensor empty_cpu(Sizes sizes, ScalarType dtype) {
  return detail::new_contiguous(sizes.begin(), sizes.size(), dtype,
                                aoti_torch_device_type_cpu(), -1);
}
// aten::sort.stable(Tensor self, *, bool? stable, int dim=-1,
//                   bool descending=False) -> (Tensor values, Tensor indices)
// along dim 0; equal values keep index order.
inline std::tuple<Tensor, Tensor> sort_stable(const Tensor& t,
                                              bool descending) {
  std::array<StableIValue, 4> stack{
      detail::box(t), detail::box(std::optional<bool>(true)),
      detail::box(int64_t{0}), detail::box(descending)};
  detail::call_aten("aten::sort", "stable", stack);
  return {detail::unbox_tensor(stack[0]), detail::unbox_tensor(stack[1])};
}
// aten::unique_consecutive(Tensor self, bool return_inverse=False,
//     bool return_counts=False, int? dim=None) -> (Tensor, Tensor, Tensor):
// the length of each run of equal consecutive values of a 1-D tensor.
inline Tensor unique_consecutive_counts(const Tensor& t) {
  std::array<StableIValue, 4> stack{detail::box(t), detail::box(false),
                                    detail::box(true),
                                    detail::box(std::optional<int64_t>())};
  detail::call_aten("aten::unique_consecutive", "", stack);
  (void)detail::unbox_tensor(stack[0]);  // the values and the (empty)
  (void)detail::unbox_tensor(stack[1]);  // inverse: owned here, so freed
  return detail::unbox_tensor(stack[2]);
}
// --- end soft_nms --------------------------------------------------------------

// ---- deform_conv2d (csrc/ops/deform_conv) -------------------------------
// The grouped GEMMs, the bias and the chunk copies.
// aten::bmm(Tensor self, Tensor mat2) -> Tensor
inline Tensor bmm(const Tensor& a, const Tensor& b) {
  std::array<StableIValue, 2> stack{detail::box(a), detail::box(b)};
  detail::call_aten("aten::bmm", "", stack);
  return detail::unbox_tensor(stack[0]);
}
// a + b (broadcasting; floating tensors), a new tensor: aten::sub(a, b,
// alpha=-1) through the shim, which ATen computes as add(a, b, alpha=1): the
// same kernel and bits as at::add (add.Tensor's Scalar alpha cannot be passed
// by name at 2.11).
inline Tensor add(const Tensor& a, const Tensor& b) {
  return torch::stable::subtract(a, b, -1.0);
}
// dst = src (broadcasting src), in place.
inline void copy_into(const Tensor& dst, const Tensor& src) {
  // aoti_torch_copy_: at::copy_ in one shim call (torch::stable::copy_ is a
  // boxed call by name at the floor).
  TORCH_ERROR_CODE_CHECK(
      aoti_torch_copy_(dst.get(), src.get(), /*non_blocking=*/0));
}

}  // namespace host
}  // namespace visdet_ops

// The unboxing of host::StringArg (a str schema argument): the handle's text,
// copied into the argument, then the handle freed. The same steps as the 2.14
// headers' ToImpl<std::string>, on shim functions of the floor.
HIDDEN_NAMESPACE_BEGIN(torch, stable, detail)
template <>
struct ToImpl<visdet_ops::host::StringArg> {
  static visdet_ops::host::StringArg call(
      StableIValue val, [[maybe_unused]] uint64_t extension_build_version,
      [[maybe_unused]] bool is_internal) {
    StringHandle handle = torch::stable::detail::to<StringHandle>(val);
    size_t length = 0;
    const char* data = nullptr;
    // The handle is freed on every path, also when a query fails.
    const bool ok =
        torch_string_length(handle, &length) == AOTI_TORCH_SUCCESS &&
        torch_string_c_str(handle, &data) == AOTI_TORCH_SUCCESS;
    std::string value = ok ? std::string(data, length) : std::string();
    TORCH_ERROR_CODE_CHECK(torch_delete_string(handle));
    if (!ok) {
      throw std::runtime_error("visdet_ops: could not read a str argument");
    }
    return visdet_ops::host::StringArg(std::move(value));
  }
};
HIDDEN_NAMESPACE_END(torch, stable, detail)
