// What the rotated-box ops (box_iou_rotated, nms_rotated) share on the host:
// the input check of a set of boxes and the CPU loops' parallel range.
// Written against the host adapter (common/host.h): one source for the
// classic and the stable build.
#pragma once

#include "common/host.h"
#include "rotated_launch.h"

namespace visdet_ops {

// boxes (argument arg) is a [N, 5] floating tensor (x, y, w, h, angle); shape
// names it in the error ("[M, 5]", "[N, 5]").
void check_rotated_boxes(const char* op, const host::Tensor& boxes,
                         const char* arg, const char* shape);

// host::parallel_for as the CPU loops' ParallelRange (rotated_launch.h).
ParallelRange rotated_parallel_range();

// The CUDA launchers' name of a storage dtype (float16, bfloat16, float32,
// float64; anything else is an error naming op).
RotatedDtype rotated_dtype(const char* op, host::ScalarType dtype);

}  // namespace visdet_ops
