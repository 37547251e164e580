// box_iou_rotated: CUDA host layer (torch-facing, through the host adapter).
// The device code is in box_iou_rotated_cuda.cu.
#include "box_iou_rotated.h"
#include "common/host.h"
#include "common/host_cuda.h"
#include "ops/_rotated/rotated.h"

namespace visdet_ops {
namespace {

using host::ScalarType;
using host::Tensor;

Tensor box_iou_rotated_cuda_kernel(const Tensor& bboxes1,
                                   const Tensor& bboxes2, host::StringArg mode,
                                   bool aligned, bool clockwise) {
  VISDET_CHECK(host::is_cuda(bboxes1),
               "box_iou_rotated: the CUDA kernel needs CUDA tensors, got "
               "bboxes1 on ",
               host::device_of(bboxes1));
  const host::CudaDeviceGuard device_guard(bboxes1);
  // float16 / bfloat16 boxes are read directly (computed in float).
  const BoxIouRotatedPrepared p = box_iou_rotated_prepare(
      bboxes1, bboxes2, mode, aligned, clockwise, /*widen_16bit=*/false);
  if (p.output.numel() == 0) return p.result();
  const RotatedDtype dtype =
      rotated_dtype("box_iou_rotated", host::dtype_of(p.output));
  const int64_t bytes = box_iou_rotated_cuda_workspace_bytes(dtype, p.shape);
  Tensor workspace;  // none for aligned pairs
  if (bytes > 0) workspace = host::empty({bytes}, ScalarType::Byte, bboxes1);
  VISDET_CUDA_CHECK(box_iou_rotated_cuda_launch(
      dtype, host::const_data<void>(p.boxes1),
      host::const_data<void>(p.boxes2), p.shape,
      host::mutable_data<void>(p.output),
      bytes > 0 ? host::mutable_data<void>(workspace) : nullptr,
      host::current_cuda_stream(bboxes1)));
  return p.result();
}

}  // namespace

VISDET_LIBRARY_IMPL(CUDA, m) {
  m.impl("box_iou_rotated", VISDET_KERNEL(box_iou_rotated_cuda_kernel));
}

}  // namespace visdet_ops
