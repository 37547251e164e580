// The prepared arguments of box_iou_rotated, shared by the CPU and CUDA host
// layers. Written against the host adapter (common/host.h): one source for the
// classic and the stable build.
#pragma once

#include "box_iou_rotated_launch.h"
#include "common/host.h"

namespace visdet_ops {

// Checked inputs as contiguous [rows, 5] / [cols, 5] boxes in the compute
// dtype and the uninitialised output in it ([rows, cols], or [rows] when
// aligned); result() gives the output in bboxes1's dtype.
struct BoxIouRotatedPrepared {
  BoxIouRotatedShape shape;
  host::ScalarType dtype;  // bboxes1's: the dtype of the result
  host::Tensor boxes1, boxes2, output;
  host::Tensor result() const;
};

// mode: "iou" or "iof". widen_16bit: float16 / bfloat16 boxes are computed
// through float32 copies (the CPU kernels); else read as they are (CUDA).
BoxIouRotatedPrepared box_iou_rotated_prepare(const host::Tensor& bboxes1,
                                              const host::Tensor& bboxes2,
                                              host::StringArg mode,
                                              bool aligned, bool clockwise,
                                              bool widen_16bit);

}  // namespace visdet_ops
