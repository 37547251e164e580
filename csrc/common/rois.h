// Torch-facing RoI checks shared by every RoI op (roi_align, roi_pool, ...).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

namespace visdet_ops {

// rois must be [K, 5] with finite values and batch indices in
// [0, batch_size). On CUDA: one small kernel and one 4-byte copy (a sync).
void check_rois_values(const at::Tensor& rois, int64_t batch_size,
                       const char* op);

// The same check where it costs no device sync: CPU rois always; CUDA rois
// only when the environment variable VISDET_OPS_SYNC_ROI_CHECKS is "1".
// Without it the host does not wait for the GPU: the CUDA kernels of the ops
// that call this test each RoI themselves (roi_flags in rois_kernel.h) and
// give NaN output and no gradient for an invalid one, never an out-of-bounds
// access. Called once per forward; backward ops rely on the forward's check
// (and on the same in-kernel guard).
void check_rois_values_nosync(const at::Tensor& rois, int64_t batch_size,
                              const char* op);

// Whether VISDET_OPS_SYNC_ROI_CHECKS=1 (read on every call, so a test or a
// debugging session can switch it on at run time).
bool sync_roi_checks_enabled();

// The compute dtype of the RoI kernels for a storage dtype: float32 for
// float16/bfloat16 (sample positions in max mode and gradient accumulation
// buffers use it), the dtype itself otherwise.
inline at::ScalarType roi_compute_dtype(at::ScalarType dtype) {
  return dtype == at::kHalf || dtype == at::kBFloat16 ? at::kFloat : dtype;
}

// The CPU kernels take float32 and float64; 16-bit floats are CUDA only.
// (Other dtypes are left to check_floating and its message.)
inline void check_cpu_float(const at::Tensor& t, const char* op,
                            const char* arg) {
  const at::ScalarType dtype = t.scalar_type();
  TORCH_CHECK(!at::isFloatingType(dtype) || dtype == at::kFloat ||
                  dtype == at::kDouble,
              op, ": ", arg, " on the CPU must be float32 or float64 (float16 "
              "and bfloat16 are supported on CUDA), got ", dtype);
}

#if defined(VISDET_OPS_WITH_CUDA)
int rois_flags_cuda(const at::Tensor& rois, int64_t batch_size);
#endif

}  // namespace visdet_ops
