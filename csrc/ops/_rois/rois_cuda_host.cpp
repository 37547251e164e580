// CUDA host layer of the RoI checks. Device code: rois_cuda.cu.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/host_cuda.h"
#include "rois.h"
#include "rois_launch.h"

namespace visdet_ops {

int rois_flags_cuda_host(const host::Tensor& rois, int64_t batch_size) {
  const host::CudaDeviceGuard device_guard(rois);
  const host::Tensor flags = host::empty({1}, host::ScalarType::Int, rois);
  const cudaStream_t stream = host::current_cuda_stream(rois);
  host::dispatch_floating_types<__half, __nv_bfloat16>(
      host::dtype_of(rois), "rois_flags_cuda", [&](auto tag) {
        using T = typename decltype(tag)::type;
        VISDET_CUDA_CHECK(rois_flags_cuda_launch<T>(
            host::const_data<T>(rois), rois.size(0),
            static_cast<int>(rois.size(1)), batch_size,
            host::mutable_data<int>(flags), stream));
      });
  return host::read_scalar<int>(flags);
}

}  // namespace visdet_ops
