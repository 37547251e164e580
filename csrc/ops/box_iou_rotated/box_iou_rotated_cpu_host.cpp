// box_iou_rotated: CPU host layer (torch-facing, through the host adapter),
// the mirror image of box_iou_rotated_cuda_host.cpp. CPU loops:
// box_iou_rotated_cpu.cpp.
#include "box_iou_rotated.h"
#include "common/host.h"
#include "ops/_rotated/rotated.h"

namespace visdet_ops {
namespace {

using host::Tensor;

Tensor box_iou_rotated_cpu_kernel(const Tensor& bboxes1, const Tensor& bboxes2,
                                  host::StringArg mode, bool aligned,
                                  bool clockwise) {
  VISDET_CHECK(host::is_cpu(bboxes1),
               "box_iou_rotated: the CPU kernel needs CPU tensors, got "
               "bboxes1 on ",
               host::device_of(bboxes1));
  // float16 / bfloat16: computed in float32 on the CPU, rounded once.
  const BoxIouRotatedPrepared p = box_iou_rotated_prepare(
      bboxes1, bboxes2, mode, aligned, clockwise, /*widen_16bit=*/true);
  if (p.output.numel() == 0) return p.result();
  host::dispatch_float_double(
      host::dtype_of(p.output), "box_iou_rotated_cpu", [&](auto tag) {
        using T = typename decltype(tag)::type;
        box_iou_rotated_cpu<T>(host::const_data<T>(p.boxes1),
                               host::const_data<T>(p.boxes2), p.shape,
                               rotated_parallel_range(),
                               host::mutable_data<T>(p.output));
      });
  return p.result();
}

}  // namespace

VISDET_LIBRARY_IMPL(CPU, m) {
  m.impl("box_iou_rotated", VISDET_KERNEL(box_iou_rotated_cpu_kernel));
}

}  // namespace visdet_ops
