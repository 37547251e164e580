// Torch-facing helpers shared by the CPU and CUDA host layers of soft_nms.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>

#include <tuple>

namespace visdet_ops {

// Checked inputs, laid out by segment (one per class; one without idxs):
// boxes [n, 4] and scores [n] contiguous in the compute dtype (float32 for
// float16/bfloat16 inputs), order [n] the input index of each position
// (undefined when positions are input indices), offsets [S + 1] int64 on
// the CPU.
struct SoftNmsPrepared {
  at::Tensor boxes, scores, order, offsets;
  int64_t n = 0, num_segments = 0, max_len = 0;
};

SoftNmsPrepared soft_nms_prepare(const at::Tensor& boxes,
                                 const at::Tensor& scores, double iou_threshold,
                                 double sigma, double min_score,
                                 int64_t method, int64_t offset,
                                 const c10::optional<at::Tensor>& idxs);

// picked / picked_scores [n] and counts [S] (any device) -> (input indices,
// scores in `dtype`), all classes merged in descending score order (ties:
// lower input index first).
std::tuple<at::Tensor, at::Tensor> soft_nms_finish(
    const SoftNmsPrepared& p, const at::Tensor& picked,
    const at::Tensor& picked_scores, const at::Tensor& counts,
    at::ScalarType dtype);

std::tuple<at::Tensor, at::Tensor> soft_nms_empty(const at::Tensor& boxes);

}  // namespace visdet_ops
