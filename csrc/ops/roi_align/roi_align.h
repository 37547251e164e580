// The prepared arguments of roi_align, shared by the CPU and CUDA host layers.
// Written against the host adapter (common/host.h): one source for the
// classic and the stable build.
#pragma once

#include <tuple>

#include "common/host.h"
#include "roi_align_launch.h"

namespace visdet_ops {

// What a device's forward needs, checked and allocated once for every device:
// the launch shape, contiguous inputs and the uninitialised outputs
// ([K, C, PH, PW] values and, in max mode, the chosen sample's (y, x) per
// value in the compute dtype (float32 for 16-bit input); empty [0] tensors in
// avg mode). RoI values are checked here only where that needs no device
// sync (check_rois_values_nosync).
struct RoIAlignForward {
  RoIAlignShape shape;
  host::Tensor input, rois;
  host::Tensor output, argmax_y, argmax_x;
  bool is_max() const;
  std::tuple<host::Tensor, host::Tensor, host::Tensor> outputs() const {
    return {output, argmax_y, argmax_x};
  }
};

RoIAlignForward roi_align_prepare_forward(const host::Tensor& input,
                                          const host::Tensor& rois,
                                          int64_t pooled_height,
                                          int64_t pooled_width,
                                          double spatial_scale,
                                          int64_t sampling_ratio,
                                          host::StringArg pool_mode,
                                          bool aligned);

// The same for the backward: the inputs and a gradient buffer in the compute
// dtype (grad_accum; the caller converts it to grad_output's dtype), as
// BackwardFor says. RoI values are not checked: the forward did, and the
// kernels skip an invalid RoI anyway.
struct RoIAlignBackward {
  RoIAlignShape shape;
  host::Tensor grad_output, rois, argmax_y, argmax_x;
  host::Tensor grad_accum;
  bool is_max() const;
  host::Tensor grad_input() const;
  RoIAlignGradStrides grad_strides() const {
    return {grad_output.stride(0), grad_output.stride(1),
            grad_output.stride(2), grad_output.stride(3)};
  }
};

// What the device's backward kernels want: the CPU loops a contiguous
// grad_output and a zeroed grad_accum; the CUDA launcher reads any strides
// and takes grad_accum uninitialised (it zeroes it on the stream, cheaper on
// the host than a zeros() through the dispatcher).
enum class BackwardFor { kCpu, kCuda };

RoIAlignBackward roi_align_prepare_backward(
    const host::Tensor& grad_output, const host::Tensor& rois,
    const host::Tensor& argmax_y, const host::Tensor& argmax_x,
    int64_t batch_size, int64_t channels, int64_t height, int64_t width,
    double spatial_scale, int64_t sampling_ratio, host::StringArg pool_mode,
    bool aligned, BackwardFor device);

}  // namespace visdet_ops
