// The prepared arguments of soft_nms, shared by the CPU and CUDA host layers.
// Written against the host adapter (common/host.h): one source for the
// classic and the stable build.
#pragma once

#include <optional>
#include <tuple>

#include "common/host.h"

namespace visdet_ops {

// Checked inputs, laid out by segment (one per class; one without idxs):
// boxes [n, 4] and scores [n] contiguous in the compute dtype (float32 for
// float16/bfloat16 inputs), order [n] the input index of each position
// (only when has_order; otherwise positions are input indices), offsets
// [S + 1] int64 on the CPU, method the kernels' number of the `str method`.
struct SoftNmsPrepared {
  host::Tensor boxes, scores, order, offsets;
  bool has_order = false;
  int method = 0;
  int64_t n = 0, num_segments = 0, max_len = 0;
};

SoftNmsPrepared soft_nms_prepare(const host::Tensor& boxes,
                                 const host::Tensor& scores,
                                 double iou_threshold, double sigma,
                                 double min_score, host::StringArg method,
                                 int64_t offset,
                                 const std::optional<host::Tensor>& idxs);

// picked / picked_scores [n] and counts [S] (any device) -> (input indices,
// scores in `dtype`), all classes merged in descending score order (ties:
// lower input index first).
std::tuple<host::Tensor, host::Tensor> soft_nms_finish(
    const SoftNmsPrepared& p, const host::Tensor& picked,
    const host::Tensor& picked_scores, const host::Tensor& counts,
    host::ScalarType dtype);

std::tuple<host::Tensor, host::Tensor> soft_nms_empty(
    const host::Tensor& boxes);

}  // namespace visdet_ops
