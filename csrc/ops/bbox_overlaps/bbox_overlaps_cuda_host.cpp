// bbox_overlaps: CUDA host layer (torch-facing, through the host adapter). The
// device code is in bbox_overlaps_cuda.cu.
#include "bbox_overlaps.h"
#include "common/host.h"
#include "common/host_cuda.h"

namespace visdet_ops {
namespace {

using host::ScalarType;
using host::Tensor;

BoxDtype box_dtype(ScalarType t) {
  switch (t) {
    case ScalarType::Float:
      return BoxDtype::kFloat;
    case ScalarType::Double:
      return BoxDtype::kDouble;
    case ScalarType::Half:
      return BoxDtype::kHalf;
    case ScalarType::BFloat16:
      return BoxDtype::kBFloat16;
    default:
      VISDET_CHECK(false, "bbox_overlaps: CUDA supports float16, bfloat16, "
                   "float32 and float64 boxes, got ", t);
      return BoxDtype::kFloat;  // unreachable
  }
}

Tensor bbox_overlaps_cuda_kernel(const Tensor& bboxes1, const Tensor& bboxes2,
                                 host::StringArg mode, bool aligned,
                                 int64_t offset, double eps) {
  VISDET_CHECK(host::is_cuda(bboxes1),
               "bbox_overlaps: the CUDA kernel needs CUDA tensors, got "
               "bboxes1 on ",
               host::device_of(bboxes1));
  const host::CudaDeviceGuard device_guard(bboxes1);
  // float16 / bfloat16 boxes are read directly (computed in float).
  const BboxOverlapsPrepared p = bbox_overlaps_prepare(
      bboxes1, bboxes2, mode, aligned, offset, eps, /*widen_16bit=*/false);
  if (p.output.numel() == 0) return p.result();
  VISDET_CUDA_CHECK(bbox_overlaps_cuda_launch(
      box_dtype(host::dtype_of(p.output)), host::const_data<void>(p.boxes1),
      host::const_data<void>(p.boxes2), p.shape, static_cast<double>(offset),
      eps, host::mutable_data<void>(p.output),
      host::current_cuda_stream(bboxes1)));
  return p.result();
}

}  // namespace

VISDET_LIBRARY_IMPL(CUDA, m) {
  m.impl("bbox_overlaps", VISDET_KERNEL(bbox_overlaps_cuda_kernel));
}

}  // namespace visdet_ops
