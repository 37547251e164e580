// The prepared arguments of roi_pool, shared by the CPU and CUDA host layers.
// Written against the host adapter (common/host.h): one source for the
// classic and the stable build.
#pragma once

#include <tuple>

#include "common/host.h"
#include "ops/_rois/rois.h"
#include "roi_pool_launch.h"

namespace visdet_ops {

// What a device's forward needs, checked and allocated once for every device:
// the launch shape, contiguous inputs and the uninitialised outputs
// ([K, C, PH, PW] values and int32 argmax). RoI values are checked here only
// where that needs no device sync (check_rois_values_nosync).
struct RoIPoolForward {
  RoIPoolShape shape;
  host::Tensor input, rois;
  host::Tensor output, argmax;
  std::tuple<host::Tensor, host::Tensor> outputs() const {
    return {output, argmax};
  }
};

RoIPoolForward roi_pool_prepare_forward(const host::Tensor& input,
                                        const host::Tensor& rois,
                                        int64_t pooled_height,
                                        int64_t pooled_width,
                                        double spatial_scale);

// The same for the backward: contiguous inputs and a zeroed gradient buffer
// in the compute dtype (grad_accum; grad_input() converts it to grad_output's
// dtype). RoI values are not checked: the forward did, and the kernels skip
// an invalid RoI or argmax anyway.
struct RoIPoolBackward : RoIGradBuffers {
  RoIPoolShape shape;
  host::Tensor argmax;
};

RoIPoolBackward roi_pool_prepare_backward(const host::Tensor& grad_output,
                                          const host::Tensor& rois,
                                          const host::Tensor& argmax,
                                          int64_t batch_size, int64_t channels,
                                          int64_t height, int64_t width);

}  // namespace visdet_ops
