// CUDA host layer of the RoI checks. Device code: rois_cuda.cu.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "common/cuda_types.h"
#include "common/rois.h"
#include "common/rois_launch.h"

namespace visdet_ops {

int rois_flags_cuda(const at::Tensor& rois, int64_t batch_size) {
  const c10::cuda::CUDAGuard device_guard(rois.device());
  at::Tensor flags = at::empty({1}, rois.options().dtype(at::kInt));
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, rois.scalar_type(), "rois_flags_cuda", [&] {
        C10_CUDA_CHECK(rois_flags_cuda_launch(
            cuda_data<scalar_t>(rois), rois.size(0), batch_size,
            flags.mutable_data_ptr<int>(), stream));
      });
  return flags.item<int>();
}

}  // namespace visdet_ops
