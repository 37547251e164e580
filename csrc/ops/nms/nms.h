// Torch-facing helpers shared by the CPU and CUDA host layers of the NMS
// family (nms, batched_nms, nms_match; soft_nms shares the input checks).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>

namespace visdet_ops {

// What every device's NMS needs, checked and prepared once:
// order: [n] stable descending-score order (input indices);
// boxes: [n, 4] contiguous rows in that order, in the compute dtype (float32
//   for float16/bfloat16 inputs, else the input dtype);
// classes: [n] int64 classes in that order, undefined without idxs.
struct NmsPrepared {
  at::Tensor order, boxes, classes;
  int64_t n = 0;
};

// The checks of nms_prepare, for the family's other ops (soft_nms): boxes
// [N, 4] floating, scores [N] of the same dtype and device, offset 0 or 1,
// iou_threshold not NaN, idxs (optional) [N] integer on the same device.
void check_nms_inputs(const char* op, const at::Tensor& boxes,
                      const at::Tensor& scores,
                      const c10::optional<at::Tensor>& idxs,
                      double iou_threshold, int64_t offset);

NmsPrepared nms_prepare(const char* op, const at::Tensor& boxes,
                        const at::Tensor& scores,
                        const c10::optional<at::Tensor>& idxs,
                        double iou_threshold, int64_t offset);

// nms_match: dets [N, 5] (x1, y1, x2, y2, score).
NmsPrepared nms_match_prepare(const at::Tensor& dets, double iou_threshold);

// float32 for reduced-precision inputs: the IoU is computed in float.
at::ScalarType nms_compute_dtype(at::ScalarType dtype);

}  // namespace visdet_ops
