// NMS family: CUDA host layer (torch-facing, through the host adapter). The
// device code is in nms_cuda.cu.
#include <optional>

#include "common/host.h"
#include "common/host_cuda.h"
#include "nms.h"
#include "nms_launch.h"

namespace visdet_ops {
namespace {

using host::ScalarType;
using host::Tensor;

void check_cuda_size(const char* op, int64_t n) {
  VISDET_CHECK(nms_cuda_col_blocks(n) <= 65535, op,
               ": at most 65535 * 64 = 4194240 boxes are supported on CUDA, "
               "got ",
               n);
}

Tensor nms_cuda_impl(const char* op, const Tensor& boxes, const Tensor& scores,
                     const std::optional<Tensor>& idxs, double iou_threshold,
                     int64_t offset) {
  VISDET_CHECK(host::is_cuda(boxes), op,
               ": the CUDA kernel needs CUDA tensors, got boxes on ",
               host::device_of(boxes));
  const host::CudaDeviceGuard device_guard(boxes);
  const NmsPrepared p =
      nms_prepare(op, boxes, scores, idxs, iou_threshold, offset);
  if (p.n == 0) return host::empty({0}, ScalarType::Long, boxes);
  check_cuda_size(op, p.n);
  // One allocation for the kept indices and, in its last slot, their count.
  const Tensor kept = host::empty({p.n + 1}, ScalarType::Long, boxes);
  const Tensor workspace =
      host::empty({nms_cuda_workspace_bytes(p.n)}, ScalarType::Byte, boxes);
  const cudaStream_t stream = host::current_cuda_stream(boxes);
  host::dispatch_float_double(host::dtype_of(p.boxes), "nms_cuda", [&](auto tag) {
    using T = typename decltype(tag)::type;
    int64_t* kept_data = host::mutable_data<int64_t>(kept);
    VISDET_CUDA_CHECK(nms_cuda_launch<T>(
        host::const_data<T>(p.boxes),
        p.has_classes ? host::const_data<int64_t>(p.classes) : nullptr,
        host::const_data<int64_t>(p.order), p.n, static_cast<T>(iou_threshold),
        static_cast<T>(offset), kept_data, kept_data + p.n,
        host::mutable_data<void>(workspace), stream));
  });
  // The output size is data-dependent: one 8-byte device-to-host copy.
  const int64_t num_kept =
      host::read_scalar<int64_t>(host::narrow(kept, 0, p.n, 1));
  return host::narrow(kept, 0, 0, num_kept);
}

Tensor nms_match_cuda_kernel(const Tensor& dets, double iou_threshold) {
  VISDET_CHECK(host::is_cuda(dets),
               "nms_match: the CUDA kernel needs CUDA tensors, got dets on ",
               host::device_of(dets));
  const host::CudaDeviceGuard device_guard(dets);
  const NmsPrepared p = nms_match_prepare(dets, iou_threshold);
  if (p.n == 0) return host::empty({0}, ScalarType::Long, dets);
  check_cuda_size("nms_match", p.n);
  const Tensor leader = host::empty({p.n}, ScalarType::Long, dets);
  const Tensor kept = host::empty({p.n + 1}, ScalarType::Long, dets);
  const Tensor workspace =
      host::empty({nms_cuda_workspace_bytes(p.n)}, ScalarType::Byte, dets);
  const cudaStream_t stream = host::current_cuda_stream(dets);
  host::dispatch_float_double(
      host::dtype_of(p.boxes), "nms_match_cuda", [&](auto tag) {
        using T = typename decltype(tag)::type;
        VISDET_CUDA_CHECK(nms_match_cuda_launch<T>(
            host::const_data<T>(p.boxes), p.n, static_cast<T>(iou_threshold),
            host::mutable_data<int64_t>(leader),
            host::mutable_data<int64_t>(kept),
            host::mutable_data<void>(workspace), stream));
      });
  return nms_match_groups(p, leader);
}

}  // namespace

VISDET_LIBRARY_IMPL(CUDA, m) {
  m.impl("nms", VISDET_KERNEL(nms_kernel<nms_cuda_impl>));
  m.impl("batched_nms", VISDET_KERNEL(batched_nms_kernel<nms_cuda_impl>));
  m.impl("nms_match", VISDET_KERNEL(nms_match_cuda_kernel));
}

}  // namespace visdet_ops
