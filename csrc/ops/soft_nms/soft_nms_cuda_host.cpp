// soft_nms: CUDA host layer (torch-facing). The device code is in
// soft_nms_cuda.cu.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "soft_nms.h"
#include "soft_nms_launch.h"

namespace visdet_ops {
namespace {

std::tuple<at::Tensor, at::Tensor> soft_nms_cuda_kernel(
    const at::Tensor& boxes, const at::Tensor& scores, double iou_threshold,
    double sigma, double min_score, int64_t method, int64_t offset,
    const c10::optional<at::Tensor>& idxs) {
  TORCH_CHECK(boxes.is_cuda(),
              "soft_nms: the CUDA kernel needs CUDA tensors, got boxes on ",
              boxes.device());
  const c10::cuda::CUDAGuard device_guard(boxes.device());
  const SoftNmsPrepared p = soft_nms_prepare(
      boxes, scores, iou_threshold, sigma, min_score, method, offset, idxs);
  if (p.n == 0) return soft_nms_empty(boxes);
  const at::TensorOptions longs = boxes.options().dtype(at::kLong);
  const at::Tensor offsets = p.offsets.to(boxes.device(), /*non_blocking=*/false);
  at::Tensor picked = at::empty({p.n}, longs);
  at::Tensor picked_scores = at::empty({p.n}, p.scores.options());
  at::Tensor counts = at::empty({p.num_segments}, longs);
  const int device = boxes.get_device();
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES(p.boxes.scalar_type(), "soft_nms_cuda", [&] {
    const SoftNmsParams<scalar_t> params{
        static_cast<scalar_t>(iou_threshold), static_cast<scalar_t>(sigma),
        static_cast<scalar_t>(min_score), static_cast<scalar_t>(offset),
        static_cast<int>(method)};
    at::Tensor workspace = at::empty(
        {soft_nms_cuda_workspace_bytes<scalar_t>(p.n, p.num_segments,
                                                p.max_len, device)},
        boxes.options().dtype(at::kByte));
    C10_CUDA_CHECK(soft_nms_cuda_launch<scalar_t>(
        p.boxes.data_ptr<scalar_t>(), p.scores.data_ptr<scalar_t>(),
        offsets.data_ptr<int64_t>(), p.num_segments, p.n, p.max_len, params,
        picked.data_ptr<int64_t>(), picked_scores.data_ptr<scalar_t>(),
        counts.data_ptr<int64_t>(), workspace.data_ptr(), device, stream));
  });
  return soft_nms_finish(p, picked, picked_scores, counts,
                         boxes.scalar_type());
}

}  // namespace

TORCH_LIBRARY_IMPL(visdet_ops, CUDA, m) {
  m.impl("soft_nms", &soft_nms_cuda_kernel);
}

}  // namespace visdet_ops
