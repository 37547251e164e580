// nms_rotated: CPU host layer (torch-facing, through the host adapter), the
// mirror image of nms_rotated_cuda_host.cpp. CPU loops: nms_rotated_cpu.cpp.
#include <optional>

#include "common/host.h"
#include "nms_rotated.h"
#include "nms_rotated_launch.h"
#include "ops/_rotated/rotated.h"

namespace visdet_ops {
namespace {

using host::ScalarType;
using host::Tensor;

Tensor nms_rotated_cpu_kernel(const Tensor& dets, const Tensor& scores,
                              double iou_threshold,
                              const std::optional<Tensor>& labels,
                              bool clockwise) {
  const NmsRotatedPrepared p =
      nms_rotated_prepare(dets, scores, iou_threshold, labels);
  VISDET_CHECK(host::is_cpu(dets),
               "nms_rotated: the CPU kernel needs CPU tensors, got dets on ",
               host::device_of(dets));
  if (p.n == 0) return host::empty({0}, ScalarType::Long, dets);
  const Tensor keep = host::empty({p.n}, ScalarType::Bool, dets);
  host::dispatch_float_double(
      host::dtype_of(p.boxes), "nms_rotated_cpu", [&](auto tag) {
        using T = typename decltype(tag)::type;
        // bool is one byte holding 0 or 1: the kernel writes exactly that.
        nms_rotated_cpu<T>(
            host::const_data<T>(p.boxes),
            p.has_classes ? host::const_data<int64_t>(p.classes) : nullptr,
            p.n, static_cast<T>(iou_threshold), clockwise,
            rotated_parallel_range(), host::mutable_data<uint8_t>(keep));
      });
  return host::masked_select(p.order, keep);
}

}  // namespace

VISDET_LIBRARY_IMPL(CPU, m) {
  m.impl("nms_rotated", VISDET_KERNEL(nms_rotated_cpu_kernel));
}

}  // namespace visdet_ops
