#include "common/rois.h"

#include <ATen/ATen.h>

#include <cstdlib>
#include <cstring>

#include "common/checks.h"
#include "common/rois_kernel.h"
#include "common/rois_launch.h"

namespace visdet_ops {

void check_rois_values(const at::Tensor& rois, int64_t batch_size,
                       const char* op) {
  if (rois.size(0) == 0) return;
  const at::Tensor rois_c = rois.contiguous();
  int flags = 0;
#if defined(VISDET_OPS_WITH_CUDA)
  if (rois_c.is_cuda()) {
    flags = rois_flags_cuda(rois_c, batch_size);
  } else
#endif
  {
    TORCH_CHECK(rois_c.device().is_cpu(), op, ": rois on ", rois_c.device(),
                " are not supported by this build");
    TORCH_CHECK(rois_c.scalar_type() == at::kFloat ||
                    rois_c.scalar_type() == at::kDouble,
                op, ": rois on the CPU must be float32 or float64, got ",
                rois_c.scalar_type());
    AT_DISPATCH_FLOATING_TYPES(rois_c.scalar_type(), "rois_flags_cpu", [&] {
      flags = rois_flags_cpu<scalar_t>(rois_c.data_ptr<scalar_t>(),
                                       rois_c.size(0), batch_size);
    });
  }
  if (flags == 0) return;
  TORCH_CHECK(!(flags & kRoINonFinite), op,
              ": rois must be finite, got non-finite values");
  const auto minmax = at::aminmax(rois_c.select(1, 0).to(at::kCPU, at::kDouble));
  TORCH_CHECK(false, op, ": rois[:, 0] (batch index) must lie in [0, ",
              batch_size - 1, "] for input of batch size ", batch_size,
              ", got values in [", std::get<0>(minmax).item<double>(), ", ",
              std::get<1>(minmax).item<double>(), "]");
}

bool sync_roi_checks_enabled() {
  return sync_checks_enabled("VISDET_OPS_SYNC_ROI_CHECKS");
}

void check_rois_values_nosync(const at::Tensor& rois, int64_t batch_size,
                              const char* op) {
  if (rois.device().is_cpu() || sync_roi_checks_enabled()) {
    check_rois_values(rois, batch_size, op);
  }
}

}  // namespace visdet_ops
