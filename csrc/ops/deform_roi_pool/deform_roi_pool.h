// The prepared arguments of deform_roi_pool, shared by the CPU and CUDA host
// layers. Written against the host adapter (common/host.h): one source for the
// classic and the stable build.
#pragma once

#include <optional>
#include <tuple>

#include "common/host.h"
#include "deform_roi_pool_launch.h"

namespace visdet_ops {

// What a device's forward needs, checked and allocated once for every
// device: the launch shape, contiguous inputs (rois in the compute dtype:
// float32 for float16/bfloat16 input, else input's dtype; offset only when
// has_offset) and the uninitialised [K, C, PH, PW] output.
struct DeformRoIPoolForward {
  DeformRoIPoolShape shape;
  bool has_offset = false;
  host::Tensor input, rois, offset;
  host::Tensor output;
};

DeformRoIPoolForward deform_roi_pool_prepare_forward(
    const host::Tensor& input, const host::Tensor& rois,
    const std::optional<host::Tensor>& offset, int64_t pooled_height,
    int64_t pooled_width, double spatial_scale, int64_t sampling_ratio,
    double gamma);

// The same for the backward: contiguous inputs, grad_input zeroed in the
// compute dtype (float32 accumulation for 16-bit inputs; outputs() converts)
// and grad_offset ([K, 2, PH, PW], or [0] without offset; zeroed when there is
// no output element to write it, else uninitialised).
struct DeformRoIPoolBackward {
  DeformRoIPoolShape shape;
  bool has_offset = false;
  host::Tensor grad_output, input, rois, offset;
  host::Tensor grad_input, grad_offset;
  std::tuple<host::Tensor, host::Tensor> outputs() const;
};

DeformRoIPoolBackward deform_roi_pool_prepare_backward(
    const host::Tensor& grad_output, const host::Tensor& input,
    const host::Tensor& rois, const std::optional<host::Tensor>& offset,
    double spatial_scale, int64_t sampling_ratio, double gamma);

}  // namespace visdet_ops
