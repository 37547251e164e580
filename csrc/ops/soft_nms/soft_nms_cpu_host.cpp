// soft_nms: CPU host layer (torch-facing, through the host adapter), the
// mirror image of soft_nms_cuda_host.cpp. CPU loop: soft_nms_cpu.cpp.
#include <optional>
#include <tuple>

#include "common/host.h"
#include "soft_nms.h"
#include "soft_nms_launch.h"

namespace visdet_ops {
namespace {

using host::ScalarType;
using host::Tensor;

std::tuple<Tensor, Tensor> soft_nms_cpu_kernel(
    const Tensor& boxes, const Tensor& scores, double iou_threshold,
    double sigma, double min_score, host::StringArg method, int64_t offset,
    const std::optional<Tensor>& idxs) {
  const SoftNmsPrepared p = soft_nms_prepare(
      boxes, scores, iou_threshold, sigma, min_score, method, offset, idxs);
  VISDET_CHECK(host::is_cpu(boxes),
               "soft_nms: the CPU kernel needs CPU tensors, got boxes on ",
               host::device_of(boxes));
  if (p.n == 0) return soft_nms_empty(boxes);
  const Tensor picked = host::empty({p.n}, ScalarType::Long, boxes);
  const Tensor picked_scores =
      host::empty({p.n}, host::dtype_of(p.scores), p.scores);
  const Tensor counts =
      host::empty({p.num_segments}, ScalarType::Long, boxes);
  host::dispatch_float_double(
      host::dtype_of(p.boxes), "soft_nms_cpu", [&](auto tag) {
        using T = typename decltype(tag)::type;
        const SoftNmsParams<T> params{
            static_cast<T>(iou_threshold), static_cast<T>(sigma),
            static_cast<T>(min_score), static_cast<T>(offset), p.method};
        soft_nms_cpu<T>(host::const_data<T>(p.boxes),
                        host::const_data<T>(p.scores),
                        host::const_data<int64_t>(p.offsets), p.num_segments,
                        params, host::mutable_data<int64_t>(picked),
                        host::mutable_data<T>(picked_scores),
                        host::mutable_data<int64_t>(counts));
      });
  return soft_nms_finish(p, picked, picked_scores, counts,
                         host::dtype_of(boxes));
}

}  // namespace

VISDET_LIBRARY_IMPL(CPU, m) {
  m.impl("soft_nms", VISDET_KERNEL(soft_nms_cpu_kernel));
}

}  // namespace visdet_ops
