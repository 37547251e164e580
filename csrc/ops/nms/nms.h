// Torch-facing helpers shared by the CPU and CUDA host layers of nms.
#pragma once

#include <ATen/core/Tensor.h>

namespace visdet_ops {

void nms_check_inputs(const at::Tensor& boxes, const at::Tensor& scores,
                      double iou_threshold, int64_t offset);

// Indices that sort scores in descending order, stable.
at::Tensor nms_sorted_order(const at::Tensor& scores);

}  // namespace visdet_ops
