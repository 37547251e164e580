// bbox_overlaps: CPU host layer (torch-facing, through the host adapter), the
// mirror image of bbox_overlaps_cuda_host.cpp. CPU loops: bbox_overlaps_cpu.cpp.
#include <algorithm>

#include "bbox_overlaps.h"
#include "common/host.h"

namespace visdet_ops {
namespace {

using host::Tensor;

Tensor bbox_overlaps_cpu_kernel(const Tensor& bboxes1, const Tensor& bboxes2,
                                host::StringArg mode, bool aligned,
                                int64_t offset, double eps) {
  VISDET_CHECK(host::is_cpu(bboxes1),
               "bbox_overlaps: the CPU kernel needs CPU tensors, got bboxes1 "
               "on ",
               host::device_of(bboxes1));
  // float16 / bfloat16: computed in float32 on the CPU, rounded once.
  const BboxOverlapsPrepared p = bbox_overlaps_prepare(
      bboxes1, bboxes2, mode, aligned, offset, eps, /*widen_16bit=*/true);
  if (p.output.numel() == 0) return p.result();
  const BboxOverlapsShape shape = p.shape;
  // Grain: about 16k pair evaluations per task.
  const int64_t per_row = shape.aligned ? 1 : std::max<int64_t>(shape.cols, 1);
  const int64_t grain = std::max<int64_t>(1, 16384 / per_row);
  host::dispatch_float_double(
      host::dtype_of(p.output), "bbox_overlaps_cpu", [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* d1 = host::const_data<T>(p.boxes1);
        const T* d2 = host::const_data<T>(p.boxes2);
        T* o = host::mutable_data<T>(p.output);
        host::parallel_for(0, shape.batch * shape.rows, grain,
                           [&](int64_t begin, int64_t end) {
                             bbox_overlaps_cpu<T>(d1, d2, shape,
                                                  static_cast<T>(offset),
                                                  static_cast<T>(eps), begin,
                                                  end, o);
                           });
      });
  return p.result();
}

}  // namespace

VISDET_LIBRARY_IMPL(CPU, m) {
  m.impl("bbox_overlaps", VISDET_KERNEL(bbox_overlaps_cpu_kernel));
}

}  // namespace visdet_ops
