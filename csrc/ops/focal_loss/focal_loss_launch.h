// Torch-free entry points of the focal loss kernels: pointers, sizes, stream.
//
// Common arguments: input [rows, classes] logits (contiguous), target [rows]
// int64 class indices, weight [classes] per-class weights or nullptr (row n is
// scaled by weight[target[n]]), gamma and alpha as in mmcv.
//
// Valid targets: sigmoid 0 <= t <= classes (t == classes: background, every
// class negative, weight factor 1); softmax t < classes (t < 0: the row is
// ignored, loss and gradient 0, as in mmcv). Rows with any other target get
// NaN loss / gradient; the CUDA forward with check_targets also raises the
// flag in workspace[0].
//
// Forward with grad (not nullptr): it also writes the gradient of the summed
// loss, d sum(loss) / d input times grad_scale (1 / rows for 'mean'), so that
// a training step needs no second pass over the logits; the backward then
// multiplies it by grad_output (focal_loss_scale_grad, nothing to do for the
// usual grad_output of exactly 1).
#pragma once

#include <cstdint>

#if defined(VISDET_OPS_WITH_CUDA)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#endif

namespace visdet_ops {

// CPU (float, double): rows [begin, end). The caller has checked the targets.
// Forward: writes loss[n * classes + c] (sigmoid) / loss[n] (softmax) when
// loss != nullptr, else each row's loss summed over its classes to
// row_sum[n] (sigmoid; softmax writes its one value there).
template <typename T>
void sigmoid_focal_loss_forward_cpu(const T* input, const int64_t* target,
                                    const T* weight, int64_t classes, T gamma,
                                    T alpha, int64_t begin, int64_t end,
                                    T* loss, T* row_sum, T grad_scale,
                                    T* grad);

template <typename T>
void softmax_focal_loss_forward_cpu(const T* input, const int64_t* target,
                                    const T* weight, int64_t classes, T gamma,
                                    T alpha, int64_t begin, int64_t end,
                                    T* loss, T grad_scale, T* grad);

// Backward: grad_input[n, c] = grad_output[n * go_stride_n + c * go_stride_c]
// * scale * d loss[n(, c)] / d input[n, c]. Strides 0 broadcast a scalar
// (reduction 'mean' / 'sum', or an expanded grad); softmax uses go_stride_n only.
template <typename T>
void sigmoid_focal_loss_backward_cpu(const T* grad_output, int64_t go_stride_n,
                                     int64_t go_stride_c, T scale,
                                     const T* input, const int64_t* target,
                                     const T* weight, int64_t classes, T gamma,
                                     T alpha, int64_t begin, int64_t end,
                                     T* grad_input);

template <typename T>
void softmax_focal_loss_backward_cpu(const T* grad_output, int64_t go_stride_n,
                                     T scale, const T* input,
                                     const int64_t* target, const T* weight,
                                     int64_t classes, T gamma, T alpha,
                                     int64_t begin, int64_t end,
                                     T* grad_input);

#if defined(VISDET_OPS_WITH_CUDA)
// Scratch of a CUDA forward, in int32 words: word 0 is the bad-target flag
// (check_targets: zeroed, then raised by the kernel on a bad target; the host
// reads it after the launch), the rest the per-block partial sums of
// reduction 'mean' / 'sum'. Contents on entry are ignored. workspace may be
// nullptr for reduction kNone without check_targets.
int64_t focal_loss_cuda_workspace_words();

// T: float, double, __half, __nv_bfloat16 (computed in float, double for
// double). rows > 0 and classes > 0. reduction: focal_loss_detail::Reduction;
// kNone writes loss [rows, classes] (sigmoid) / [rows] (softmax), kMean / kSum
// write the one value to *loss (the mean divides by rows, as mmcv). Every
// reduction is a fixed-order tree: bitwise reproducible.
template <typename T>
cudaError_t sigmoid_focal_loss_forward_cuda_launch(
    const T* input, const int64_t* target, const T* weight, int64_t rows,
    int64_t classes, double gamma, double alpha, int reduction, T* loss,
    int32_t* workspace, bool check_targets, double grad_scale, T* grad,
    cudaStream_t stream);

template <typename T>
cudaError_t softmax_focal_loss_forward_cuda_launch(
    const T* input, const int64_t* target, const T* weight, int64_t rows,
    int64_t classes, double gamma, double alpha, int reduction, T* loss,
    int32_t* workspace, bool check_targets, double grad_scale, T* grad,
    cudaStream_t stream);

// No sync, no scratch; rows with an invalid target get a NaN gradient.
template <typename T>
cudaError_t sigmoid_focal_loss_backward_cuda_launch(
    const T* grad_output, int64_t go_stride_n, int64_t go_stride_c,
    double scale, const T* input, const int64_t* target, const T* weight,
    int64_t rows, int64_t classes, double gamma, double alpha, T* grad_input,
    cudaStream_t stream);

template <typename T>
cudaError_t softmax_focal_loss_backward_cuda_launch(
    const T* grad_output, int64_t go_stride_n, double scale, const T* input,
    const int64_t* target, const T* weight, int64_t rows, int64_t classes,
    double gamma, double alpha, T* grad_input, cudaStream_t stream);
// grad[0, numel) *= *grad_output, read on the device (no host sync); the
// kernel returns at once where *grad_output == 1.
template <typename T>
cudaError_t focal_loss_scale_grad_cuda_launch(T* grad, int64_t numel,
                                              const T* grad_output,
                                              cudaStream_t stream);
#endif

}  // namespace visdet_ops
