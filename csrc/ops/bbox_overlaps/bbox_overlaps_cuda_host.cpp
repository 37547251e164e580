// bbox_overlaps: CUDA host layer (torch-facing). The device code is in
// bbox_overlaps_cuda.cu.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "bbox_overlaps.h"

namespace visdet_ops {
namespace {

BoxDtype box_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return BoxDtype::kFloat;
    case at::kDouble:
      return BoxDtype::kDouble;
    case at::kHalf:
      return BoxDtype::kHalf;
    case at::kBFloat16:
      return BoxDtype::kBFloat16;
    default:
      TORCH_CHECK(false, "bbox_overlaps: CUDA supports float16, bfloat16, "
                  "float32 and float64 boxes, got ", t);
  }
}

at::Tensor bbox_overlaps_cuda_kernel(const at::Tensor& bboxes1,
                                     const at::Tensor& bboxes2, int64_t mode,
                                     bool aligned, int64_t offset,
                                     double eps) {
  TORCH_CHECK(bboxes1.is_cuda(),
              "bbox_overlaps: the CUDA kernel needs CUDA tensors, got "
              "bboxes1 on ",
              bboxes1.device());
  const c10::cuda::CUDAGuard device_guard(bboxes1.device());
  BboxOverlapsPrepared p =
      bbox_overlaps_prepare(bboxes1, bboxes2, mode, aligned, offset, eps);
  if (p.output.numel() == 0) return p.output;
  C10_CUDA_CHECK(bbox_overlaps_cuda_launch(
      box_dtype(p.output.scalar_type()), p.boxes1.data_ptr(),
      p.boxes2.data_ptr(), p.shape, static_cast<double>(offset), eps,
      p.output.data_ptr(), c10::cuda::getCurrentCUDAStream()));
  return p.output;
}

}  // namespace

TORCH_LIBRARY_IMPL(visdet_ops, CUDA, m) {
  m.impl("bbox_overlaps", &bbox_overlaps_cuda_kernel);
}

}  // namespace visdet_ops
