// The prepared arguments of carafe and carafe_naive, shared by the CPU and
// CUDA host layers. Written against the host adapter (common/host.h): one
// source for the classic and the stable build.
#pragma once

#include <tuple>

#include "carafe_launch.h"
#include "common/host.h"

namespace visdet_ops {

// carafe (tiled CUDA kernels) and carafe_naive (direct ones) compute the same
// function with the same arguments. Each device's host functions take the op
// as a template argument, so that each registers as a plain function.
enum class CarafeOp { kCarafe, kCarafeNaive };

constexpr const char* carafe_op_name(CarafeOp op) {
  return op == CarafeOp::kCarafe ? "carafe" : "carafe_naive";
}

// What a device's forward needs, checked and allocated once for every device
// (op names carafe or carafe_naive in the messages): the shape, contiguous
// features [N, C, H, W] and masks [N, G*K*K, H*S, W*S], and the uninitialised
// output [N, C, H*S, W*S] (every element is written by the kernels).
struct CarafeForward {
  CarafeShape shape;
  host::Tensor features, masks;
  host::Tensor output;
};

CarafeForward carafe_prepare_forward(const char* op,
                                     const host::Tensor& features,
                                     const host::Tensor& masks,
                                     int64_t kernel_size, int64_t group_size,
                                     int64_t scale_factor);

// The same plus grad_output [N, C, H*S, W*S], and the two uninitialised
// gradients in the dtype of features (every element written).
struct CarafeBackward {
  CarafeShape shape;
  host::Tensor grad_output, features, masks;
  host::Tensor grad_features, grad_masks;
  std::tuple<host::Tensor, host::Tensor> outputs() const {
    return {grad_features, grad_masks};
  }
};

CarafeBackward carafe_prepare_backward(const char* op,
                                       const host::Tensor& grad_output,
                                       const host::Tensor& features,
                                       const host::Tensor& masks,
                                       int64_t kernel_size, int64_t group_size,
                                       int64_t scale_factor);

}  // namespace visdet_ops
