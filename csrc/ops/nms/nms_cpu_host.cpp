// NMS family: CPU host layer (torch-facing, through the host adapter), the
// mirror image of nms_cuda_host.cpp. CPU loops: nms_cpu.cpp.
#include <optional>

#include "common/host.h"
#include "nms.h"
#include "nms_launch.h"

namespace visdet_ops {
namespace {

using host::ScalarType;
using host::Tensor;

Tensor nms_cpu_impl(const char* op, const Tensor& boxes, const Tensor& scores,
                    const std::optional<Tensor>& idxs, double iou_threshold,
                    int64_t offset) {
  const NmsPrepared p =
      nms_prepare(op, boxes, scores, idxs, iou_threshold, offset);
  VISDET_CHECK(host::is_cpu(boxes), op,
               ": the CPU kernel needs CPU tensors, got boxes on ",
               host::device_of(boxes));
  if (p.n == 0) return host::empty({0}, ScalarType::Long, boxes);
  const Tensor keep = host::empty({p.n}, ScalarType::Bool, boxes);
  host::dispatch_float_double(host::dtype_of(p.boxes), "nms_cpu", [&](auto tag) {
    using T = typename decltype(tag)::type;
    // bool is one byte holding 0 or 1: the kernel writes exactly that.
    nms_cpu<T>(host::const_data<T>(p.boxes),
               p.has_classes ? host::const_data<int64_t>(p.classes) : nullptr,
               p.n, static_cast<T>(iou_threshold), static_cast<T>(offset),
               host::mutable_data<uint8_t>(keep));
  });
  return host::masked_select(p.order, keep);
}

Tensor nms_match_cpu_kernel(const Tensor& dets, double iou_threshold) {
  const NmsPrepared p = nms_match_prepare(dets, iou_threshold);
  VISDET_CHECK(host::is_cpu(dets),
               "nms_match: the CPU kernel needs CPU tensors, got dets on ",
               host::device_of(dets));
  if (p.n == 0) return host::empty({0}, ScalarType::Long, dets);
  const Tensor leader = host::empty({p.n}, ScalarType::Long, dets);
  host::dispatch_float_double(
      host::dtype_of(p.boxes), "nms_match_cpu", [&](auto tag) {
        using T = typename decltype(tag)::type;
        nms_match_cpu<T>(host::const_data<T>(p.boxes), p.n,
                         static_cast<T>(iou_threshold),
                         host::mutable_data<int64_t>(leader));
      });
  return nms_match_groups(p, leader);
}

}  // namespace

VISDET_LIBRARY_IMPL(CPU, m) {
  m.impl("nms", VISDET_KERNEL(nms_kernel<nms_cpu_impl>));
  m.impl("batched_nms", VISDET_KERNEL(batched_nms_kernel<nms_cpu_impl>));
  m.impl("nms_match", VISDET_KERNEL(nms_match_cpu_kernel));
}

}  // namespace visdet_ops
