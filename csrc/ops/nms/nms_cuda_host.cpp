// nms: CUDA host layer (torch-facing). The device code is in nms_cuda.cu.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "nms.h"
#include "nms_launch.h"

namespace visdet_ops {
namespace {

at::Tensor nms_cuda_kernel(const at::Tensor& boxes, const at::Tensor& scores,
                           double iou_threshold, int64_t offset) {
  nms_check_inputs(boxes, scores, iou_threshold, offset);
  TORCH_CHECK(boxes.is_cuda(), "nms: the CUDA kernel needs CUDA tensors, got boxes on ",
              boxes.device());
  const c10::cuda::CUDAGuard device_guard(boxes.device());
  const int64_t n = boxes.size(0);
  if (n == 0) return at::empty({0}, boxes.options().dtype(at::kLong));
  TORCH_CHECK(nms_cuda_col_blocks(n) <= 65535,
              "nms: at most 65535 * 64 = 4194240 boxes are supported on CUDA, "
              "got ", n);

  const at::Tensor order = nms_sorted_order(scores);
  const at::Tensor boxes_sorted = boxes.index_select(0, order).contiguous();
  // One allocation for the kept indices and, in its last slot, their count.
  at::Tensor kept = at::empty({n + 1}, boxes.options().dtype(at::kLong));
  at::Tensor workspace = at::empty({nms_cuda_workspace_bytes(n)},
                                   boxes.options().dtype(at::kByte));
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES(boxes.scalar_type(), "nms_cuda", [&] {
    C10_CUDA_CHECK(nms_cuda_launch<scalar_t>(
        boxes_sorted.data_ptr<scalar_t>(), order.data_ptr<int64_t>(), n,
        static_cast<scalar_t>(iou_threshold), static_cast<scalar_t>(offset),
        kept.data_ptr<int64_t>(), kept.data_ptr<int64_t>() + n,
        workspace.data_ptr(), stream));
  });
  // The output size is data-dependent: one 8-byte device-to-host copy.
  const int64_t num_kept = kept[n].item<int64_t>();
  return kept.narrow(0, 0, num_kept);
}

}  // namespace

TORCH_LIBRARY_IMPL(visdet_ops, CUDA, m) {
  m.impl("nms", &nms_cuda_kernel);
}

}  // namespace visdet_ops
