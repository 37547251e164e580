// Torch-facing RoI checks shared by every RoI op (roi_align, roi_pool, ...).
#pragma once

#include <ATen/core/Tensor.h>

namespace visdet_ops {

// rois must be [K, 5] with finite values and batch indices in
// [0, batch_size). On CUDA: one small kernel and one 4-byte copy (a sync).
void check_rois_values(const at::Tensor& rois, int64_t batch_size,
                       const char* op);

#if defined(VISDET_OPS_WITH_CUDA)
int rois_flags_cuda(const at::Tensor& rois, int64_t batch_size);
#endif

}  // namespace visdet_ops
