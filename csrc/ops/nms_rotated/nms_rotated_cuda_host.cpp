// nms_rotated: CUDA host layer (torch-facing, through the host adapter). The
// device code is in nms_rotated_cuda.cu.
#include <optional>

#include "common/host.h"
#include "common/host_cuda.h"
#include "nms_rotated.h"
#include "nms_rotated_launch.h"
#include "ops/_rotated/rotated.h"

namespace visdet_ops {
namespace {

using host::ScalarType;
using host::Tensor;

Tensor nms_rotated_cuda_kernel(const Tensor& dets, const Tensor& scores,
                               double iou_threshold,
                               const std::optional<Tensor>& labels,
                               bool clockwise) {
  VISDET_CHECK(host::is_cuda(dets),
               "nms_rotated: the CUDA kernel needs CUDA tensors, got dets on ",
               host::device_of(dets));
  const host::CudaDeviceGuard device_guard(dets);
  const NmsRotatedPrepared p =
      nms_rotated_prepare(dets, scores, iou_threshold, labels);
  if (p.n == 0) return host::empty({0}, ScalarType::Long, dets);
  VISDET_CHECK(nms_rotated_cuda_fits(p.n),
               "nms_rotated: at most 65535 * 64 = 4194240 boxes are supported "
               "on CUDA, got ",
               p.n);
  const RotatedDtype dtype = rotated_dtype("nms_rotated", host::dtype_of(p.boxes));
  // One allocation for the kept indices and, in its last slot, their count.
  const Tensor kept = host::empty({p.n + 1}, ScalarType::Long, dets);
  const Tensor workspace = host::empty(
      {nms_rotated_cuda_workspace_bytes(dtype, p.n)}, ScalarType::Byte, dets);
  int64_t* kept_data = host::mutable_data<int64_t>(kept);
  VISDET_CUDA_CHECK(nms_rotated_cuda_launch(
      dtype, host::const_data<void>(p.boxes),
      p.has_classes ? host::const_data<int64_t>(p.classes) : nullptr,
      host::const_data<int64_t>(p.order), p.n, iou_threshold, clockwise,
      kept_data, kept_data + p.n, host::mutable_data<void>(workspace),
      host::current_cuda_stream(dets)));
  // The output size is data-dependent: one 8-byte device-to-host copy.
  const int64_t num_kept =
      host::read_scalar<int64_t>(host::narrow(kept, 0, p.n, 1));
  return host::narrow(kept, 0, 0, num_kept);
}

}  // namespace

VISDET_LIBRARY_IMPL(CUDA, m) {
  m.impl("nms_rotated", VISDET_KERNEL(nms_rotated_cuda_kernel));
}

}  // namespace visdet_ops
