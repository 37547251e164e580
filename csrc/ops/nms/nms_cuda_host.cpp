// NMS family: CUDA host layer (torch-facing). The device code is in nms_cuda.cu.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "nms.h"
#include "nms_launch.h"

namespace visdet_ops {
namespace {

void check_cuda_size(const char* op, int64_t n) {
  TORCH_CHECK(nms_cuda_col_blocks(n) <= 65535, op,
              ": at most 65535 * 64 = 4194240 boxes are supported on CUDA, "
              "got ",
              n);
}

at::Tensor nms_cuda_impl(const char* op, const at::Tensor& boxes,
                         const at::Tensor& scores,
                         const c10::optional<at::Tensor>& idxs,
                         double iou_threshold, int64_t offset) {
  TORCH_CHECK(boxes.is_cuda(), op,
              ": the CUDA kernel needs CUDA tensors, got boxes on ",
              boxes.device());
  const c10::cuda::CUDAGuard device_guard(boxes.device());
  const NmsPrepared p =
      nms_prepare(op, boxes, scores, idxs, iou_threshold, offset);
  if (p.n == 0) return at::empty({0}, boxes.options().dtype(at::kLong));
  check_cuda_size(op, p.n);
  // One allocation for the kept indices and, in its last slot, their count.
  at::Tensor kept = at::empty({p.n + 1}, boxes.options().dtype(at::kLong));
  at::Tensor workspace = at::empty({nms_cuda_workspace_bytes(p.n)},
                                   boxes.options().dtype(at::kByte));
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES(p.boxes.scalar_type(), "nms_cuda", [&] {
    C10_CUDA_CHECK(nms_cuda_launch<scalar_t>(
        p.boxes.data_ptr<scalar_t>(),
        p.classes.defined() ? p.classes.data_ptr<int64_t>() : nullptr,
        p.order.data_ptr<int64_t>(), p.n,
        static_cast<scalar_t>(iou_threshold), static_cast<scalar_t>(offset),
        kept.data_ptr<int64_t>(), kept.data_ptr<int64_t>() + p.n,
        workspace.data_ptr(), stream));
  });
  // The output size is data-dependent: one 8-byte device-to-host copy.
  const int64_t num_kept = kept[p.n].item<int64_t>();
  return kept.narrow(0, 0, num_kept);
}

at::Tensor nms_cuda_kernel(const at::Tensor& boxes, const at::Tensor& scores,
                           double iou_threshold, int64_t offset) {
  return nms_cuda_impl("nms", boxes, scores, c10::nullopt, iou_threshold,
                       offset);
}

at::Tensor batched_nms_cuda_kernel(const at::Tensor& boxes,
                                   const at::Tensor& scores,
                                   const at::Tensor& idxs,
                                   double iou_threshold, int64_t offset) {
  return nms_cuda_impl("batched_nms", boxes, scores, idxs, iou_threshold,
                       offset);
}

at::Tensor nms_match_cuda_kernel(const at::Tensor& dets,
                                 double iou_threshold) {
  TORCH_CHECK(dets.is_cuda(),
              "nms_match: the CUDA kernel needs CUDA tensors, got dets on ",
              dets.device());
  const c10::cuda::CUDAGuard device_guard(dets.device());
  const NmsPrepared p = nms_match_prepare(dets, iou_threshold);
  if (p.n == 0) return at::empty({0}, dets.options().dtype(at::kLong));
  check_cuda_size("nms_match", p.n);
  at::Tensor leader = at::empty({p.n}, dets.options().dtype(at::kLong));
  at::Tensor kept = at::empty({p.n + 1}, dets.options().dtype(at::kLong));
  at::Tensor workspace = at::empty({nms_cuda_workspace_bytes(p.n)},
                                   dets.options().dtype(at::kByte));
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES(p.boxes.scalar_type(), "nms_match_cuda", [&] {
    C10_CUDA_CHECK(nms_match_cuda_launch<scalar_t>(
        p.boxes.data_ptr<scalar_t>(), p.n,
        static_cast<scalar_t>(iou_threshold), leader.data_ptr<int64_t>(),
        kept.data_ptr<int64_t>(), workspace.data_ptr(), stream));
  });
  at::Tensor out = at::empty_like(leader);
  out.index_put_({p.order}, p.order.index_select(0, leader));
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(visdet_ops, CUDA, m) {
  m.impl("nms", &nms_cuda_kernel);
  m.impl("batched_nms", &batched_nms_cuda_kernel);
  m.impl("nms_match", &nms_match_cuda_kernel);
}

}  // namespace visdet_ops
