// Torch-facing RoI checks shared by every RoI op (roi_align, roi_pool, ...).
// Written against the host adapter: the same checks in both builds.
#pragma once

#include <cmath>

#include "common/checks.h"
#include "common/host.h"
#include "rois_kernel.h"

namespace visdet_ops {

// rois must be [K, 5] (or [K, 6]: rotated RoIs; the caller has checked the
// shape, and the columns checked are rois.size(1)) with finite values and
// batch indices in [0, batch_size). On CUDA: one small kernel and one 4-byte
// copy (a sync).
void check_rois_values(const host::Tensor& rois, int64_t batch_size,
                       const char* op);

// The same check where it costs no device sync: CPU rois always; CUDA rois
// only when the environment variable VISDET_OPS_SYNC_ROI_CHECKS is "1".
// Without it the host does not wait for the GPU: the CUDA kernels of the ops
// that call this test each RoI themselves (roi_flags in rois_kernel.h) and
// give NaN output and no gradient for an invalid one, never an out-of-bounds
// access. Called once per forward; backward ops rely on the forward's check
// (and on the same in-kernel guard).
void check_rois_values_nosync(const host::Tensor& rois, int64_t batch_size,
                              const char* op);

// Whether VISDET_OPS_SYNC_ROI_CHECKS=1 (read on every call, so a test or a
// debugging session can switch it on at run time).
bool sync_roi_checks_enabled();

// The integer arguments every RoI op shares, before any work: the output size
// per side, and that the output [K, C, PH, PW] fits int64.
inline void check_roi_output_size(const host::Tensor& input,
                                  const host::Tensor& rois,
                                  int64_t pooled_height, int64_t pooled_width,
                                  const char* op) {
  check_int_range(pooled_height, 1, int_bounds::kMaxPooledSize, op,
                  "pooled_height");
  check_int_range(pooled_width, 1, int_bounds::kMaxPooledSize, op,
                  "pooled_width");
  checked_numel({rois.size(0), input.size(1), pooled_height, pooled_width}, op,
                "the output [K, C, PH, PW]");
}

// sampling_ratio of roi_align and deform_roi_pool: -1 and 0 are adaptive.
inline void check_sampling_ratio(int64_t sampling_ratio, const char* op) {
  check_int_range(sampling_ratio, int_bounds::kMinSamplingRatio,
                  int_bounds::kMaxSamplingRatio, op, "sampling_ratio");
}

// rois of an axis-aligned RoI op: [K, 5] (batch_index, x1, y1, x2, y2); of a
// rotated one: [K, 6] (batch_index, x, y, w, h, angle).
inline void check_rois_shape(const host::Tensor& rois, int64_t columns,
                             const char* op) {
  check_dim(rois, 2, op, "rois");
  check_size(rois, 1, columns, op, "rois",
             columns == kRotatedRoIColumns
                 ? "[K, 6] (batch_index, x, y, w, h, angle)"
                 : "[K, 5] (batch_index, x1, y1, x2, y2)");
}

// output_size and spatial_scale, as every RoI op words them (the integer
// bounds and the output's size are check_roi_output_size's).
inline void check_pooled_size(int64_t pooled_height, int64_t pooled_width,
                              const char* op) {
  VISDET_CHECK(pooled_height > 0 && pooled_width > 0, op,
               ": output_size must be positive, got (", pooled_height, ", ",
               pooled_width, ")");
}

inline void check_spatial_scale(double spatial_scale, const char* op) {
  VISDET_CHECK(std::isfinite(spatial_scale) && spatial_scale > 0, op,
               ": spatial_scale must be a positive finite number, got ",
               spatial_scale);
}

inline void check_output_size_and_scale(int64_t pooled_height,
                                        int64_t pooled_width,
                                        double spatial_scale, const char* op) {
  check_pooled_size(pooled_height, pooled_width, op);
  check_spatial_scale(spatial_scale, op);
}

// The compute dtype of the RoI kernels for a storage dtype: float32 for
// float16/bfloat16 (sample positions in max mode and gradient accumulation
// buffers use it), the dtype itself otherwise.
inline host::ScalarType roi_compute_dtype(host::ScalarType dtype) {
  return host::compute_dtype(dtype);
}

// rois may come in the dtype of the feature map or in the kernels' compute
// dtype: float32 RoIs beside a float16/bfloat16 input are what an AMP step
// produces (boxes stay float32). The kernels read RoIs in the compute dtype,
// so a coordinate is never rounded to 16 bits (a 1333-pixel image has no
// 16-bit resolution left).
inline void check_rois_dtype(const host::Tensor& input,
                             const host::Tensor& rois, const char* op,
                             const char* input_arg) {
  const host::ScalarType dtype = host::dtype_of(input);
  const host::ScalarType rois_dtype = host::dtype_of(rois);
  VISDET_CHECK(rois_dtype == dtype || rois_dtype == roi_compute_dtype(dtype),
               op, ": rois must have the dtype of ", input_arg, " (", dtype,
               ") or ", roi_compute_dtype(dtype), ", got ", rois_dtype);
}

// What an RoI op's backward kernels want: the CPU loops (and roi_pool's CUDA
// kernel) a contiguous grad_output and a zeroed accumulator; a CUDA launcher
// that reads grad_output through its strides and zeroes the accumulator on
// its stream (roi_align's, roi_align_rotated's) takes them as they are.
enum class RoIGradLayout { kContiguousZeroed, kStridedUninitialised };

// The buffers of every RoI op's backward: grad_output, rois (contiguous, in
// the kernels' compute dtype) and the input gradient's accumulator in the
// compute dtype (grad_input() converts it to grad_output's dtype). The ops'
// backward structs add their shape and extras (argmax) to it.
struct RoIGradBuffers {
  host::Tensor grad_output, rois;
  host::Tensor grad_accum;
  host::Tensor grad_input() const {
    return host::to_dtype(grad_accum, host::dtype_of(grad_output));
  }
};

inline RoIGradBuffers roi_grad_buffers(const host::Tensor& grad_output,
                                       const host::Tensor& rois,
                                       int64_t batch_size, int64_t channels,
                                       int64_t height, int64_t width,
                                       RoIGradLayout layout) {
  const host::ScalarType compute =
      roi_compute_dtype(host::dtype_of(grad_output));
  const bool strided = layout == RoIGradLayout::kStridedUninitialised;
  RoIGradBuffers b;
  b.grad_output = strided ? grad_output : host::contiguous(grad_output);
  b.rois = host::contiguous(host::to_dtype(rois, compute));
  b.grad_accum = strided ? host::empty({batch_size, channels, height, width},
                                       compute, grad_output)
                         : host::zeros({batch_size, channels, height, width},
                                       compute, grad_output);
  return b;
}

// The OR of roi_flags (rois_kernel.h) over contiguous rois [K, 5] or [K, 6]
// (rois.size(1) columns) of one device, from its host file: rois_cpu_host.cpp (float32 or float64 rois; op
// names the op in the error for another dtype), rois_cuda_host.cpp (one small
// kernel and a 4-byte copy: a sync).
int rois_flags_cpu_host(const host::Tensor& rois, int64_t batch_size,
                        const char* op);
#if defined(VISDET_OPS_WITH_CUDA)
int rois_flags_cuda_host(const host::Tensor& rois, int64_t batch_size);
#endif

}  // namespace visdet_ops
