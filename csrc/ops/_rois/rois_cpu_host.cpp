// CPU host layer of the RoI checks, the mirror image of rois_cuda_host.cpp.
// CPU loop: rois_cpu.cpp.
#include "common/host.h"
#include "rois.h"
#include "rois_launch.h"

namespace visdet_ops {

int rois_flags_cpu_host(const host::Tensor& rois, int64_t batch_size,
                        const char* op) {
  const host::ScalarType dtype = host::dtype_of(rois);
  VISDET_CHECK(
      dtype == host::ScalarType::Float || dtype == host::ScalarType::Double,
      op, ": rois on the CPU must be float32 or float64, got ", dtype);
  int flags = 0;
  host::dispatch_float_double(dtype, "rois_flags_cpu", [&](auto tag) {
    using T = typename decltype(tag)::type;
    flags = rois_flags_cpu<T>(host::const_data<T>(rois), rois.size(0),
                              static_cast<int>(rois.size(1)), batch_size);
  });
  return flags;
}

}  // namespace visdet_ops
