// The RoI value checks every RoI op shares. The flags come from each device's
// host file: rois_cpu_host.cpp and rois_cuda_host.cpp.
#include "rois.h"

#include <algorithm>

#include "common/checks.h"
#include "common/host.h"
#include "rois_kernel.h"

namespace visdet_ops {

void check_rois_values(const host::Tensor& rois, int64_t batch_size,
                       const char* op) {
  VISDET_CHECK(rois.dim() == 2 && (rois.size(1) == kRoIColumns ||
                                    rois.size(1) == kRotatedRoIColumns),
               op, ": rois must have shape [K, 5] or [K, 6], got ",
               host::shape_of(rois));
  if (rois.size(0) == 0) return;
  const host::Tensor rois_c = host::contiguous(rois);
  int flags = 0;
#if defined(VISDET_OPS_WITH_CUDA)
  if (host::is_cuda(rois_c)) {
    flags = rois_flags_cuda_host(rois_c, batch_size);
  } else
#endif
  {
    VISDET_CHECK(host::is_cpu(rois_c), op, ": rois on ",
                 host::device_of(rois_c), " are not supported by this build");
    flags = rois_flags_cpu_host(rois_c, batch_size, op);
  }
  if (flags == 0) return;
  VISDET_CHECK(!(flags & kRoINonFinite), op,
               ": rois must be finite, got non-finite values");
  // The error path only: the batch indices as float64 on the CPU, for the
  // range the message names.
  const host::Tensor batch_index = host::contiguous(host::to_dtype(
      host::to_cpu(host::select(rois_c, 1, 0)), host::ScalarType::Double));
  const double* b = host::const_data<double>(batch_index);
  const auto [lo, hi] = std::minmax_element(b, b + batch_index.numel());
  VISDET_CHECK(false, op, ": rois[:, 0] (batch index) must lie in [0, ",
               batch_size - 1, "] for input of batch size ", batch_size,
               ", got values in [", *lo, ", ", *hi, "]");
}

bool sync_roi_checks_enabled() {
  return sync_checks_enabled("VISDET_OPS_SYNC_ROI_CHECKS");
}

void check_rois_values_nosync(const host::Tensor& rois, int64_t batch_size,
                              const char* op) {
  if (host::is_cpu(rois) || sync_roi_checks_enabled()) {
    check_rois_values(rois, batch_size, op);
  }
}

}  // namespace visdet_ops
