// soft_nms: CUDA host layer (torch-facing, through the host adapter). The
// device code is in soft_nms_cuda.cu.
#include <optional>
#include <tuple>

#include "common/host.h"
#include "common/host_cuda.h"
#include "soft_nms.h"
#include "soft_nms_launch.h"

namespace visdet_ops {
namespace {

using host::ScalarType;
using host::Tensor;

std::tuple<Tensor, Tensor> soft_nms_cuda_kernel(
    const Tensor& boxes, const Tensor& scores, double iou_threshold,
    double sigma, double min_score, host::StringArg method, int64_t offset,
    const std::optional<Tensor>& idxs) {
  VISDET_CHECK(host::is_cuda(boxes),
               "soft_nms: the CUDA kernel needs CUDA tensors, got boxes on ",
               host::device_of(boxes));
  const host::CudaDeviceGuard device_guard(boxes);
  const SoftNmsPrepared p = soft_nms_prepare(
      boxes, scores, iou_threshold, sigma, min_score, method, offset, idxs);
  if (p.n == 0) return soft_nms_empty(boxes);
  const Tensor offsets =
      host::to_device(p.offsets, boxes, /*non_blocking=*/false);
  const Tensor picked = host::empty({p.n}, ScalarType::Long, boxes);
  const Tensor picked_scores =
      host::empty({p.n}, host::dtype_of(p.scores), boxes);
  const Tensor counts =
      host::empty({p.num_segments}, ScalarType::Long, boxes);
  const int device = host::device_index(boxes);
  const cudaStream_t stream = host::current_cuda_stream(boxes);
  host::dispatch_float_double(
      host::dtype_of(p.boxes), "soft_nms_cuda", [&](auto tag) {
        using T = typename decltype(tag)::type;
        const SoftNmsParams<T> params{
            static_cast<T>(iou_threshold), static_cast<T>(sigma),
            static_cast<T>(min_score), static_cast<T>(offset), p.method};
        const Tensor workspace = host::empty(
            {soft_nms_cuda_workspace_bytes<T>(p.n, p.num_segments, p.max_len,
                                              device)},
            ScalarType::Byte, boxes);
        VISDET_CUDA_CHECK(soft_nms_cuda_launch<T>(
            host::const_data<T>(p.boxes), host::const_data<T>(p.scores),
            host::const_data<int64_t>(offsets), p.num_segments, p.n,
            p.max_len, params, host::mutable_data<int64_t>(picked),
            host::mutable_data<T>(picked_scores),
            host::mutable_data<int64_t>(counts),
            host::mutable_data<void>(workspace), device, stream));
      });
  return soft_nms_finish(p, picked, picked_scores, counts,
                         host::dtype_of(boxes));
}

}  // namespace

VISDET_LIBRARY_IMPL(CUDA, m) {
  m.impl("soft_nms", VISDET_KERNEL(soft_nms_cuda_kernel));
}

}  // namespace visdet_ops
