// deform_roi_pool: schema, and the argument checks and prepare steps shared by
// all devices. Each device registers from its own host file:
// deform_roi_pool_cpu_host.cpp and deform_roi_pool_cuda_host.cpp. One source
// for the classic and the stable build (common/host.h). Autograd, autocast
// and the CUDA backward's determinism alert are registered in
// visdet_ops/ops/deform_roi_pool.py.
#include <cmath>
#include <optional>
#include <tuple>

#include "common/checks.h"
#include "common/host.h"
#include "ops/_rois/rois.h"
#include "deform_roi_pool.h"

namespace visdet_ops {
namespace {

using host::ScalarType;
using host::Tensor;

constexpr const char* kOp = "deform_roi_pool";

const Tensor* present(const std::optional<Tensor>& offset) {
  return offset.has_value() && offset->defined() ? &*offset : nullptr;
}

// Checks shared by forward and backward; returns the launch shape.
DeformRoIPoolShape check_inputs(const Tensor& input, const Tensor& rois,
                                const Tensor* offset, int64_t pooled_height,
                                int64_t pooled_width, double spatial_scale,
                                int64_t sampling_ratio, double gamma) {
  check_dim(input, 4, kOp, "input");
  check_rois_shape(rois, kRoIColumns, kOp);
  // float32/float64, and float16/bfloat16 (read directly, computed in float32).
  check_floating(input, kOp, "input");
  check_rois_dtype(input, rois, kOp, "input");
  check_same_device(input, rois, kOp, "input", "rois");
  check_output_size_and_scale(pooled_height, pooled_width, spatial_scale,
                              kOp);
  VISDET_CHECK(std::isfinite(gamma), kOp, ": gamma must be finite, got ",
               gamma);
  check_roi_output_size(input, rois, pooled_height, pooled_width, kOp);
  check_sampling_ratio(sampling_ratio, kOp);
  const int64_t k = rois.size(0);
  if (offset != nullptr) {
    VISDET_CHECK(offset->dim() == 4 && offset->size(0) == k &&
                     offset->size(1) == 2 &&
                     offset->size(2) == pooled_height &&
                     offset->size(3) == pooled_width,
                 kOp, ": offset must have shape [K, 2, PH, PW] = [", k,
                 ", 2, ", pooled_height, ", ", pooled_width, "], got ",
                 host::shape_of(*offset));
    check_same_dtype(input, *offset, kOp, "input", "offset");
    check_same_device(input, *offset, kOp, "input", "offset");
  }
  const DeformRoIPoolShape s{input.size(0), k,           input.size(1),
                             input.size(2), input.size(3), pooled_height,
                             pooled_width,  sampling_ratio};
  VISDET_CHECK(k == 0 || (s.height > 0 && s.width > 0), kOp,
               ": input must have a non-empty spatial size, got shape ",
               host::shape_of(input));
  return s;
}

// RoIs in the compute dtype, contiguous, their values validated where that
// costs no device sync (CPU RoIs; CUDA ones with VISDET_OPS_SYNC_ROI_CHECKS=1).
// Unchecked CUDA RoIs are tested by the kernels themselves (invalid_roi in
// deform_roi_pool_kernel.h: NaN output, no gradient), as roi_align's are.
Tensor prepare_rois(const Tensor& input, const Tensor& rois) {
  const ScalarType compute = roi_compute_dtype(host::dtype_of(input));
  Tensor r = host::contiguous(host::to_dtype(rois, compute));
  check_rois_values_nosync(r, input.size(0), kOp);
  return r;
}

}  // namespace

DeformRoIPoolForward deform_roi_pool_prepare_forward(
    const Tensor& input, const Tensor& rois,
    const std::optional<Tensor>& offset, int64_t pooled_height,
    int64_t pooled_width, double spatial_scale, int64_t sampling_ratio,
    double gamma) {
  const Tensor* off = present(offset);
  DeformRoIPoolForward f;
  f.shape = check_inputs(input, rois, off, pooled_height, pooled_width,
                         spatial_scale, sampling_ratio, gamma);
  const DeformRoIPoolShape& s = f.shape;
  f.rois = prepare_rois(input, rois);
  f.input = host::contiguous(input);
  f.has_offset = off != nullptr;
  if (f.has_offset) f.offset = host::contiguous(*off);
  f.output = host::empty({s.num_rois, s.channels, s.pooled_h, s.pooled_w},
                         host::dtype_of(input), input);
  return f;
}

DeformRoIPoolBackward deform_roi_pool_prepare_backward(
    const Tensor& grad_output, const Tensor& input, const Tensor& rois,
    const std::optional<Tensor>& offset, double spatial_scale,
    int64_t sampling_ratio, double gamma) {
  const Tensor* off = present(offset);
  check_dim(grad_output, 4, kOp, "grad_output");
  DeformRoIPoolBackward b;
  b.shape = check_inputs(input, rois, off, grad_output.size(2),
                         grad_output.size(3), spatial_scale, sampling_ratio,
                         gamma);
  const DeformRoIPoolShape& s = b.shape;
  check_same_dtype(input, grad_output, kOp, "input", "grad_output");
  check_same_device(input, grad_output, kOp, "input", "grad_output");
  VISDET_CHECK(grad_output.size(0) == s.num_rois &&
                   grad_output.size(1) == s.channels,
               kOp, ": grad_output must have shape [K, C, PH, PW] = [",
               s.num_rois, ", ", s.channels, ", PH, PW], got ",
               host::shape_of(grad_output));
  const ScalarType dtype = host::dtype_of(input);
  b.rois = prepare_rois(input, rois);
  b.grad_output = host::contiguous(grad_output);
  b.input = host::contiguous(input);
  b.grad_input = host::zeros({s.batch_size, s.channels, s.height, s.width},
                             roi_compute_dtype(dtype), input);
  b.has_offset = off != nullptr;
  if (b.has_offset) {
    b.offset = host::contiguous(*off);
    // No output element, no kernel: the offset gradient is zero.
    b.grad_offset =
        s.output_numel() == 0
            ? host::zeros({s.num_rois, 2, s.pooled_h, s.pooled_w}, dtype, input)
            : host::empty({s.num_rois, 2, s.pooled_h, s.pooled_w}, dtype,
                          input);
  } else {
    b.grad_offset = host::empty({0}, dtype, input);
  }
  return b;
}

std::tuple<Tensor, Tensor> DeformRoIPoolBackward::outputs() const {
  // 16-bit inputs: the float32 accumulator rounds once, at the end.
  return {host::to_dtype(grad_input, host::dtype_of(input)), grad_offset};
}

VISDET_LIBRARY_FRAGMENT(m) {
  m.def(
      "deform_roi_pool(Tensor input, Tensor rois, Tensor? offset, "
      "SymInt pooled_height, SymInt pooled_width, float spatial_scale, "
      "int sampling_ratio, float gamma) -> Tensor");
  m.def(
      "_deform_roi_pool_backward(Tensor grad_output, Tensor input, "
      "Tensor rois, Tensor? offset, float spatial_scale, int sampling_ratio, "
      "float gamma) -> (Tensor, Tensor)");
}

}  // namespace visdet_ops
