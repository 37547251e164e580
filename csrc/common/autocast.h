// Autocast kernels (torch.autocast), registered per op for the Autocast (CUDA)
// and AutocastCPU dispatch keys as torchvision does (csrc/ops/autocast/ in
// pytorch/vision): exclude the autocast key, cast the arguments by the op's
// precision policy (docs/ops.md, "Precision under autocast"), call the op
// again through the dispatcher. Being dispatcher kernels, torch.compile and
// opcheck see them; the casts are ordinary autograd ops, so each gradient
// comes back in its argument's own dtype. Torch-facing, host layer only.
#pragma once

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include <optional>

namespace visdet_ops {

// The typed handle of a registered op (found once per call site).
template <typename Signature>
c10::TypedOperatorHandle<Signature> find_op(const char* name) {
  return c10::Dispatcher::singleton()
      .findSchemaOrThrow(name, "")
      .typed<Signature>();
}

// The autocast dtype of a device (float16/bfloat16, torch.autocast's dtype).
inline at::ScalarType autocast_dtype(c10::DeviceType device) {
  return at::autocast::get_lower_precision_fp_from_device_type(device);
}

// t cast to `to` where autocast casts: a floating tensor of the autocast
// device that is not float64; anything else as is (float64 is never rounded,
// integer tensors keep their dtype). Cached like torch's own autocast casts
// (a float32 weight is cast once per autocast region).
inline at::Tensor autocast_to(at::ScalarType to, const at::Tensor& t,
                              c10::DeviceType device) {
  return at::autocast::cached_cast(to, t, device);
}

inline std::optional<at::Tensor> autocast_to(
    at::ScalarType to, const std::optional<at::Tensor>& t,
    c10::DeviceType device) {
  if (!t.has_value() || !t->defined()) return t;
  return autocast_to(to, *t, device);
}

// A floating tensor in exactly dtype `to` (float64 included: RoIs, sampling
// locations and offsets go to the kernel's compute dtype, whatever they came
// in); non-floating and undefined tensors as is, for the op's checks to name.
inline at::Tensor floating_to(at::ScalarType to, const at::Tensor& t) {
  if (!t.defined() || !at::isFloatingType(t.scalar_type()) ||
      !at::isFloatingType(to) || t.scalar_type() == to) {
    return t;
  }
  return t.to(to);
}

inline std::optional<at::Tensor> floating_to(
    at::ScalarType to, const std::optional<at::Tensor>& t) {
  if (!t.has_value()) return t;
  return floating_to(to, *t);
}

}  // namespace visdet_ops

// Registers fn<key, device> for both autocast keys: Autocast (CUDA) and
// AutocastCPU. fn is a template over (c10::DispatchKey, c10::DeviceType) whose
// first statement is
//   c10::impl::ExcludeDispatchKeyGuard no_autocast(kKey);
#define VISDET_AUTOCAST_IMPL(m, name, fn)                                  \
  m.impl(name, TORCH_FN((fn<c10::DispatchKey::Autocast,                    \
                            c10::DeviceType::CUDA>)))
#define VISDET_AUTOCAST_CPU_IMPL(m, name, fn)                              \
  m.impl(name, TORCH_FN((fn<c10::DispatchKey::AutocastCPU,                 \
                            c10::DeviceType::CPU>)))
