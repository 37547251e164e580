// The prepared arguments of nms, batched_nms and nms_match, shared by the CPU
// and CUDA host layers (the input checks, which soft_nms shares, are the box
// family's: ops/_boxes/boxes.h).
// Written against the host adapter (common/host.h): one source for the
// classic and the stable build.
#pragma once

#include <optional>

#include "common/host.h"

namespace visdet_ops {

// What every device's NMS needs, checked and prepared once:
// order: [n] stable descending-score order (input indices);
// boxes: [n, 4] contiguous rows in that order, in the compute dtype (float32
//   for float16/bfloat16 inputs, else the input dtype);
// classes: [n] int64 classes in that order, undefined without idxs.
struct NmsPrepared {
  host::Tensor order, boxes, classes;
  bool has_classes = false;
  int64_t n = 0;
};


NmsPrepared nms_prepare(const char* op, const host::Tensor& boxes,
                        const host::Tensor& scores,
                        const std::optional<host::Tensor>& idxs,
                        double iou_threshold, int64_t offset);

// nms_match: dets [N, 5] (x1, y1, x2, y2, score).
NmsPrepared nms_match_prepare(const host::Tensor& dets, double iou_threshold);

// For every input index, the input index of its group's kept box, from the
// kernels' leader (sorted position -> sorted position of its kept box).
host::Tensor nms_match_groups(const NmsPrepared& p, const host::Tensor& leader);

// float32 for reduced-precision inputs: the IoU is computed in float.
host::ScalarType nms_compute_dtype(host::ScalarType dtype);

// One device's NMS: op names the registered op in messages ("nms" or
// "batched_nms"); idxs (class-aware NMS) only for batched_nms.
using NmsImpl = host::Tensor (*)(const char* op, const host::Tensor& boxes,
                                 const host::Tensor& scores,
                                 const std::optional<host::Tensor>& idxs,
                                 double iou_threshold, int64_t offset);

// The registered nms and batched_nms of a device, over its NmsImpl
// (nms_cpu_host.cpp and nms_cuda_host.cpp register nms_kernel<their impl>).
template <NmsImpl kImpl>
host::Tensor nms_kernel(const host::Tensor& boxes, const host::Tensor& scores,
                        double iou_threshold, int64_t offset) {
  return kImpl("nms", boxes, scores, std::nullopt, iou_threshold, offset);
}

template <NmsImpl kImpl>
host::Tensor batched_nms_kernel(const host::Tensor& boxes,
                                const host::Tensor& scores,
                                const host::Tensor& idxs, double iou_threshold,
                                int64_t offset) {
  return kImpl("batched_nms", boxes, scores, idxs, iou_threshold, offset);
}

}  // namespace visdet_ops
