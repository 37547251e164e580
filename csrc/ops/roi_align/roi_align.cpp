// roi_align: schema, argument checks shared by all devices, CPU registration.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <vector>

#include "common/checks.h"
#include "common/reduced_float.h"
#include "common/rois.h"
#include "roi_align.h"
#include "roi_align_kernel.h"

namespace visdet_ops {
namespace {

constexpr const char* kOp = "roi_align";

int parse_pool_mode(c10::string_view pool_mode) {
  if (pool_mode == "max") return roi_align_detail::kMax;
  if (pool_mode == "avg") return roi_align_detail::kAvg;
  TORCH_CHECK(false, kOp, ": pool_mode must be 'avg' or 'max', got '",
              std::string(pool_mode), "'");
}

void check_rois(const at::Tensor& rois) {
  check_dim(rois, 2, kOp, "rois");
  check_size(rois, 1, 5, kOp, "rois", "[K, 5] (batch_index, x1, y1, x2, y2)");
}

void check_common(int64_t pooled_height, int64_t pooled_width,
                  double spatial_scale) {
  TORCH_CHECK(pooled_height > 0 && pooled_width > 0, kOp,
              ": output_size must be positive, got (", pooled_height, ", ",
              pooled_width, ")");
  TORCH_CHECK(std::isfinite(spatial_scale) && spatial_scale > 0, kOp,
              ": spatial_scale must be a positive finite number, got ",
              spatial_scale);
}

RoIAlignShape check_forward(const at::Tensor& input, const at::Tensor& rois,
                            int64_t pooled_height, int64_t pooled_width,
                            double spatial_scale, int64_t sampling_ratio,
                            c10::string_view pool_mode, bool aligned) {
  check_dim(input, 4, kOp, "input");
  check_rois(rois);
  check_floating(input, kOp, "input");
  check_rois_dtype(input, rois, kOp, "input");
  check_same_device(input, rois, kOp, "input", "rois");
  check_common(pooled_height, pooled_width, spatial_scale);
  check_roi_output_size(input, rois, pooled_height, pooled_width, kOp);
  check_sampling_ratio(sampling_ratio, kOp);
  RoIAlignShape s{input.size(0), rois.size(0),  input.size(1),
                  input.size(2), input.size(3), pooled_height,
                  pooled_width,  sampling_ratio, parse_pool_mode(pool_mode),
                  aligned};
  TORCH_CHECK(rois.size(0) == 0 || (s.height > 0 && s.width > 0), kOp,
              ": input must have a non-empty spatial size, got shape ",
              input.sizes());
  // In the compute dtype, which the CPU check reads (16-bit RoIs widen exactly).
  check_rois_values_nosync(rois.to(roi_compute_dtype(input.scalar_type())),
                           input.size(0), kOp);
  return s;
}

RoIAlignShape check_backward(
    const at::Tensor& grad_output, const at::Tensor& rois,
    const at::Tensor& argmax_y, const at::Tensor& argmax_x,
    int64_t batch_size, int64_t channels, int64_t height, int64_t width,
    double spatial_scale, int64_t sampling_ratio, c10::string_view pool_mode,
    bool aligned) {
  check_rois(rois);
  check_dim(grad_output, 4, kOp, "grad_output");
  check_floating(grad_output, kOp, "grad_output");
  check_rois_dtype(grad_output, rois, kOp, "grad_output");
  check_same_device(grad_output, rois, kOp, "grad_output", "rois");
  check_common(grad_output.size(2), grad_output.size(3), spatial_scale);
  check_sampling_ratio(sampling_ratio, kOp);
  RoIAlignShape s{batch_size,          rois.size(0),        channels,
                  height,              width,               grad_output.size(2),
                  grad_output.size(3), sampling_ratio,      parse_pool_mode(pool_mode),
                  aligned};
  TORCH_CHECK(grad_output.size(0) == s.num_rois && grad_output.size(1) == channels,
              kOp, ": grad_output must have shape [", s.num_rois, ", ",
              channels, ", PH, PW], got ", grad_output.sizes());
  if (s.pool_mode == roi_align_detail::kMax) {
    TORCH_CHECK(argmax_y.sizes() == grad_output.sizes() &&
                    argmax_x.sizes() == grad_output.sizes(),
                kOp, ": argmax_y and argmax_x must have the shape of "
                "grad_output ", grad_output.sizes(), ", got ",
                argmax_y.sizes(), " and ", argmax_x.sizes());
    const at::ScalarType want = roi_compute_dtype(grad_output.scalar_type());
    TORCH_CHECK(argmax_y.scalar_type() == want && argmax_x.scalar_type() == want,
                kOp, ": argmax_y and argmax_x must be ", want, " for grad_output of ",
                grad_output.scalar_type(), ", got ", argmax_y.scalar_type(),
                " and ", argmax_x.scalar_type());
    check_same_device(grad_output, argmax_y, kOp, "grad_output", "argmax_y");
    check_same_device(grad_output, argmax_x, kOp, "grad_output", "argmax_x");
  }
  TORCH_CHECK(batch_size >= 0 && channels >= 0 && height >= 0 && width >= 0,
              kOp, ": the input shape must be non-negative, got [", batch_size,
              ", ", channels, ", ", height, ", ", width, "]");
  checked_numel({batch_size, channels, height, width}, kOp,
                "grad_input [batch_size, channels, height, width]");
  // No check of the RoI values: the forward made it, and the kernels skip an
  // invalid RoI, so a direct call with bad rois cannot read or write out of
  // bounds either.
  return s;
}

}  // namespace

bool RoIAlignForward::is_max() const {
  return shape.pool_mode == roi_align_detail::kMax;
}

bool RoIAlignBackward::is_max() const {
  return shape.pool_mode == roi_align_detail::kMax;
}

RoIAlignForward roi_align_prepare_forward(const at::Tensor& input,
                                          const at::Tensor& rois,
                                          int64_t pooled_height,
                                          int64_t pooled_width,
                                          double spatial_scale,
                                          int64_t sampling_ratio,
                                          c10::string_view pool_mode,
                                          bool aligned) {
  RoIAlignForward f;
  f.shape = check_forward(input, rois, pooled_height, pooled_width,
                          spatial_scale, sampling_ratio, pool_mode, aligned);
  const RoIAlignShape& s = f.shape;
  f.input = input.contiguous();
  f.rois = rois.to(roi_compute_dtype(input.scalar_type())).contiguous();
  f.output = at::empty({s.num_rois, s.channels, s.pooled_h, s.pooled_w},
                       input.options());
  const auto argmax_options =
      input.options().dtype(roi_compute_dtype(input.scalar_type()));
  const std::vector<int64_t> argmax_shape =
      f.is_max() ? f.output.sizes().vec() : std::vector<int64_t>{0};
  f.argmax_y = at::empty(argmax_shape, argmax_options);
  f.argmax_x = at::empty(argmax_shape, argmax_options);
  return f;
}

RoIAlignBackward roi_align_prepare_backward(
    const at::Tensor& grad_output, const at::Tensor& rois,
    const at::Tensor& argmax_y, const at::Tensor& argmax_x,
    int64_t batch_size, int64_t channels, int64_t height, int64_t width,
    double spatial_scale, int64_t sampling_ratio, c10::string_view pool_mode,
    bool aligned) {
  RoIAlignBackward b;
  b.shape = check_backward(grad_output, rois, argmax_y, argmax_x, batch_size,
                           channels, height, width, spatial_scale,
                           sampling_ratio, pool_mode, aligned);
  b.grad_output = grad_output.contiguous();
  b.rois = rois.to(roi_compute_dtype(grad_output.scalar_type())).contiguous();
  b.argmax_y = argmax_y.contiguous();
  b.argmax_x = argmax_x.contiguous();
  b.grad_accum = at::zeros(
      {batch_size, channels, height, width},
      grad_output.options().dtype(roi_compute_dtype(grad_output.scalar_type())));
  return b;
}

at::Tensor RoIAlignBackward::grad_input() const {
  return grad_accum.to(grad_output.scalar_type());
}

namespace {

std::tuple<at::Tensor, at::Tensor, at::Tensor> roi_align_forward_cpu_kernel(
    const at::Tensor& input, const at::Tensor& rois, int64_t pooled_height,
    int64_t pooled_width, double spatial_scale, int64_t sampling_ratio,
    c10::string_view pool_mode, bool aligned) {
  const RoIAlignForward f =
      roi_align_prepare_forward(input, rois, pooled_height, pooled_width,
                                spatial_scale, sampling_ratio, pool_mode,
                                aligned);
  const RoIAlignShape& s = f.shape;
  const int64_t n = s.output_numel();
  if (n == 0) return f.outputs();
  // float16/bfloat16 are read directly (no float32 copy of the feature map)
  // and computed in float, as on CUDA.
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, input.scalar_type(), "roi_align_forward_cpu",
      [&] {
        using T = host_t<scalar_t>;
        using A = acc_t<T>;
        const T* in = host_data<scalar_t>(f.input);
        const A* r = f.rois.const_data_ptr<A>();
        T* out = host_mutable_data<scalar_t>(f.output);
        A* ay = f.is_max() ? f.argmax_y.mutable_data_ptr<A>() : nullptr;
        A* ax = f.is_max() ? f.argmax_x.mutable_data_ptr<A>() : nullptr;
        const int64_t grain = std::max<int64_t>(1, s.pooled_h * s.pooled_w);
        at::parallel_for(0, n, grain, [&](int64_t begin, int64_t end) {
          roi_align_forward_cpu<T>(in, r, s, static_cast<A>(spatial_scale),
                                   begin, end, out, ay, ax);
        });
      });
  return f.outputs();
}

at::Tensor roi_align_backward_cpu_kernel(
    const at::Tensor& grad_output, const at::Tensor& rois,
    const at::Tensor& argmax_y, const at::Tensor& argmax_x,
    int64_t batch_size, int64_t channels, int64_t height, int64_t width,
    double spatial_scale, int64_t sampling_ratio, c10::string_view pool_mode,
    bool aligned) {
  const RoIAlignBackward b = roi_align_prepare_backward(
      grad_output, rois, argmax_y, argmax_x, batch_size, channels, height,
      width, spatial_scale, sampling_ratio, pool_mode, aligned);
  if (b.shape.output_numel() == 0) return b.grad_input();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, grad_output.scalar_type(),
      "roi_align_backward_cpu", [&] {
        using T = host_t<scalar_t>;
        using A = acc_t<T>;
        const T* go = host_data<scalar_t>(b.grad_output);
        const A* r = b.rois.const_data_ptr<A>();
        const A* ay = b.is_max() ? b.argmax_y.const_data_ptr<A>() : nullptr;
        const A* ax = b.is_max() ? b.argmax_x.const_data_ptr<A>() : nullptr;
        A* gi = b.grad_accum.mutable_data_ptr<A>();
        // Parallel over channels: each channel's gradient is written by its
        // own output elements only, so this is race-free and sums in a fixed
        // order (in float for 16-bit grad_output, rounded once at the end).
        at::parallel_for(0, b.shape.channels, 1,
                         [&](int64_t begin, int64_t end) {
                           roi_align_backward_cpu<T>(
                               go, r, ay, ax, b.shape,
                               static_cast<A>(spatial_scale), begin, end, gi);
                         });
      });
  return b.grad_input();
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(visdet_ops, m) {
  m.def(
      "roi_align(Tensor input, Tensor rois, SymInt pooled_height, "
      "SymInt pooled_width, float spatial_scale, int sampling_ratio, "
      "str pool_mode, bool aligned) -> (Tensor, Tensor, Tensor)");
  m.def(
      "_roi_align_backward(Tensor grad_output, Tensor rois, Tensor argmax_y, "
      "Tensor argmax_x, SymInt batch_size, SymInt channels, SymInt height, "
      "SymInt width, float spatial_scale, int sampling_ratio, str pool_mode, "
      "bool aligned) -> Tensor");
}

TORCH_LIBRARY_IMPL(visdet_ops, CPU, m) {
  m.impl("roi_align", &roi_align_forward_cpu_kernel);
  m.impl("_roi_align_backward", &roi_align_backward_cpu_kernel);
}

}  // namespace visdet_ops
