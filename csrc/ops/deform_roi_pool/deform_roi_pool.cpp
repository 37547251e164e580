// deform_roi_pool: schema, argument checks shared by all devices, CPU
// registration. Autograd: deform_roi_pool_autograd.cpp.
#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <cmath>

#include "common/checks.h"
#include "common/reduced_float.h"
#include "common/rois.h"
#include "deform_roi_pool.h"
#include "deform_roi_pool_kernel.h"

namespace visdet_ops {
namespace {

constexpr const char* kOp = "deform_roi_pool";

const at::Tensor* present(const std::optional<at::Tensor>& offset) {
  return offset.has_value() && offset->defined() ? &*offset : nullptr;
}

// float32/float64, and float16/bfloat16 (computed in float32: on the CPU
// through a float32 copy, reduced_float.h).
void check_dtype(const at::Tensor& input) {
  check_floating(input, kOp, "input");
  const at::ScalarType t = input.scalar_type();
  TORCH_CHECK(t == at::kFloat || t == at::kDouble || t == at::kHalf ||
                  t == at::kBFloat16,
              kOp, ": input must be float32, float64, float16 or bfloat16, "
              "got ", t);
}

// Checks shared by forward and backward; returns the launch shape.
DeformRoIPoolShape check_inputs(const at::Tensor& input, const at::Tensor& rois,
                                const at::Tensor* offset, int64_t pooled_height,
                                int64_t pooled_width, double spatial_scale,
                                int64_t sampling_ratio, double gamma) {
  check_dim(input, 4, kOp, "input");
  check_dim(rois, 2, kOp, "rois");
  check_size(rois, 1, 5, kOp, "rois", "[K, 5] (batch_index, x1, y1, x2, y2)");
  check_dtype(input);
  check_rois_dtype(input, rois, kOp, "input");
  check_same_device(input, rois, kOp, "input", "rois");
  TORCH_CHECK(pooled_height > 0 && pooled_width > 0, kOp,
              ": output_size must be positive, got (", pooled_height, ", ",
              pooled_width, ")");
  TORCH_CHECK(std::isfinite(spatial_scale) && spatial_scale > 0, kOp,
              ": spatial_scale must be a positive finite number, got ",
              spatial_scale);
  TORCH_CHECK(std::isfinite(gamma), kOp, ": gamma must be finite, got ",
              gamma);
  check_roi_output_size(input, rois, pooled_height, pooled_width, kOp);
  check_sampling_ratio(sampling_ratio, kOp);
  const int64_t k = rois.size(0);
  if (offset != nullptr) {
    TORCH_CHECK(offset->dim() == 4 && offset->size(0) == k &&
                    offset->size(1) == 2 && offset->size(2) == pooled_height &&
                    offset->size(3) == pooled_width,
                kOp, ": offset must have shape [K, 2, PH, PW] = [", k, ", 2, ",
                pooled_height, ", ", pooled_width, "], got ", offset->sizes());
    check_same_dtype(input, *offset, kOp, "input", "offset");
    check_same_device(input, *offset, kOp, "input", "offset");
  }
  const DeformRoIPoolShape s{input.size(0), k,           input.size(1),
                             input.size(2), input.size(3), pooled_height,
                             pooled_width,  sampling_ratio};
  TORCH_CHECK(k == 0 || (s.height > 0 && s.width > 0), kOp,
              ": input must have a non-empty spatial size, got shape ",
              input.sizes());
  return s;
}

// RoIs in the compute dtype, contiguous, their values validated.
at::Tensor prepare_rois(const at::Tensor& input, const at::Tensor& rois) {
  const at::ScalarType compute =
      at::toOpMathType(input.scalar_type());
  at::Tensor r = rois.to(compute).contiguous();
  check_rois_values(r, input.size(0), kOp);
  return r;
}

}  // namespace

DeformRoIPoolForward deform_roi_pool_prepare_forward(
    const at::Tensor& input, const at::Tensor& rois,
    const std::optional<at::Tensor>& offset, int64_t pooled_height,
    int64_t pooled_width, double spatial_scale, int64_t sampling_ratio,
    double gamma) {
  const at::Tensor* off = present(offset);
  DeformRoIPoolForward f;
  f.shape = check_inputs(input, rois, off, pooled_height, pooled_width,
                         spatial_scale, sampling_ratio, gamma);
  const DeformRoIPoolShape& s = f.shape;
  f.rois = prepare_rois(input, rois);
  f.input = input.contiguous();
  if (off != nullptr) f.offset = off->contiguous();
  f.output = at::empty({s.num_rois, s.channels, s.pooled_h, s.pooled_w},
                       input.options());
  return f;
}

DeformRoIPoolBackward deform_roi_pool_prepare_backward(
    const at::Tensor& grad_output, const at::Tensor& input,
    const at::Tensor& rois, const std::optional<at::Tensor>& offset,
    double spatial_scale, int64_t sampling_ratio, double gamma) {
  const at::Tensor* off = present(offset);
  check_dim(grad_output, 4, kOp, "grad_output");
  DeformRoIPoolBackward b;
  b.shape = check_inputs(input, rois, off, grad_output.size(2),
                         grad_output.size(3), spatial_scale, sampling_ratio,
                         gamma);
  const DeformRoIPoolShape& s = b.shape;
  check_same_dtype(input, grad_output, kOp, "input", "grad_output");
  check_same_device(input, grad_output, kOp, "input", "grad_output");
  TORCH_CHECK(grad_output.size(0) == s.num_rois &&
                  grad_output.size(1) == s.channels,
              kOp, ": grad_output must have shape [K, C, PH, PW] = [",
              s.num_rois, ", ", s.channels, ", PH, PW], got ",
              grad_output.sizes());
  b.rois = prepare_rois(input, rois);
  b.grad_output = grad_output.contiguous();
  b.input = input.contiguous();
  b.grad_input = at::zeros(
      input.sizes(),
      input.options().dtype(at::toOpMathType(input.scalar_type())));
  if (off != nullptr) {
    b.offset = off->contiguous();
    b.grad_offset = at::empty(off->sizes(), input.options());
  } else {
    b.grad_offset = at::empty({0}, input.options());
  }
  return b;
}

std::tuple<at::Tensor, at::Tensor> DeformRoIPoolBackward::outputs() const {
  // 16-bit inputs: the float32 accumulator rounds once, at the end.
  return {grad_input.scalar_type() == input.scalar_type()
              ? grad_input
              : grad_input.to(input.scalar_type()),
          grad_offset};
}

namespace {

at::Tensor deform_roi_pool_forward_cpu_kernel(
    const at::Tensor& input, const at::Tensor& rois,
    const std::optional<at::Tensor>& offset, int64_t pooled_height,
    int64_t pooled_width, double spatial_scale, int64_t sampling_ratio,
    double gamma) {
  const DeformRoIPoolForward f = deform_roi_pool_prepare_forward(
      input, rois, offset, pooled_height, pooled_width, spatial_scale,
      sampling_ratio, gamma);
  const DeformRoIPoolShape& s = f.shape;
  const int64_t n = s.output_numel();
  if (n == 0) return f.output;
  // float16/bfloat16 are read directly (no float32 copy) and computed in float.
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), "deform_roi_pool_forward_cpu", [&] {
    using S = host_t<scalar_t>;
    using T = acc_t<S>;
    const S* in = host_data<scalar_t>(f.input);
    const T* r = f.rois.const_data_ptr<T>();
    const S* off = f.offset.defined() ? host_data<scalar_t>(f.offset) : nullptr;
    S* out = host_mutable_data<scalar_t>(f.output);
    const int64_t grain = std::max<int64_t>(1, s.pooled_h * s.pooled_w);
    at::parallel_for(0, n, grain, [&](int64_t begin, int64_t end) {
      deform_roi_pool_forward_cpu<S, T>(in, r, off, s, static_cast<T>(spatial_scale),
                                        static_cast<T>(gamma), begin, end, out);
    });
  });
  return f.output;
}

std::tuple<at::Tensor, at::Tensor> deform_roi_pool_backward_cpu_kernel(
    const at::Tensor& grad_output, const at::Tensor& input,
    const at::Tensor& rois, const std::optional<at::Tensor>& offset,
    double spatial_scale, int64_t sampling_ratio, double gamma) {
  const DeformRoIPoolBackward b = deform_roi_pool_prepare_backward(
      grad_output, input, rois, offset, spatial_scale, sampling_ratio, gamma);
  const DeformRoIPoolShape& s = b.shape;
  if (s.output_numel() == 0) {
    b.grad_offset.zero_();
    return b.outputs();
  }
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), "deform_roi_pool_backward_cpu", [&] {
    using S = host_t<scalar_t>;
    using T = acc_t<S>;
    const S* go = host_data<scalar_t>(b.grad_output);
    const S* in = host_data<scalar_t>(b.input);
    const T* r = b.rois.const_data_ptr<T>();
    const S* off = b.offset.defined() ? host_data<scalar_t>(b.offset) : nullptr;
    const auto scale = static_cast<T>(spatial_scale);
    const auto g = static_cast<T>(gamma);
    // In the compute dtype (a float32 buffer for 16-bit input, rounded once).
    T* gi = b.grad_input.mutable_data_ptr<T>();
    // Disjoint channel ranges: no races, and the same sums in the same
    // order whatever the thread count.
    at::parallel_for(0, s.channels, 1, [&](int64_t begin, int64_t end) {
      deform_roi_pool_backward_input_cpu<S, T>(go, r, off, s, scale, g, begin, end, gi);
    });
    if (off != nullptr) {
      S* goff = host_mutable_data<scalar_t>(b.grad_offset);
      at::parallel_for(0, s.num_bins(), 16, [&](int64_t begin, int64_t end) {
        deform_roi_pool_backward_offset_cpu<S, T>(go, in, r, off, s, scale, g, begin, end, goff);
      });
    }
  });
  return b.outputs();
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(visdet_ops, m) {
  m.def(
      "deform_roi_pool(Tensor input, Tensor rois, Tensor? offset, "
      "SymInt pooled_height, SymInt pooled_width, float spatial_scale, "
      "int sampling_ratio, float gamma) -> Tensor");
  m.def(
      "_deform_roi_pool_backward(Tensor grad_output, Tensor input, "
      "Tensor rois, Tensor? offset, float spatial_scale, int sampling_ratio, "
      "float gamma) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(visdet_ops, CPU, m) {
  m.impl("deform_roi_pool", &deform_roi_pool_forward_cpu_kernel);
  m.impl("_deform_roi_pool_backward", &deform_roi_pool_backward_cpu_kernel);
}

}  // namespace visdet_ops
