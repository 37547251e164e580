// multi_scale_deformable_attn: schema, argument checks shared by all devices,
// CPU registration. Autograd: ms_deform_attn_autograd.cpp.
#include "ms_deform_attn.h"

#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>

#include "common/checks.h"
#include "common/reduced_float.h"

namespace visdet_ops {
namespace {

constexpr const char* kOp = "multi_scale_deformable_attn";

void check_shapes(const at::Tensor& value, const at::Tensor& spatial_shapes,
                  const at::Tensor& level_start_index,
                  const at::Tensor& sampling_locations,
                  const at::Tensor& attention_weights, int64_t im2col_step) {
  check_dim(value, 4, kOp, "value");
  check_dim(spatial_shapes, 2, kOp, "value_spatial_shapes");
  check_size(spatial_shapes, 1, 2, kOp, "value_spatial_shapes",
             "[num_levels, 2] (H, W)");
  check_dim(level_start_index, 1, kOp, "value_level_start_index");
  check_dim(sampling_locations, 6, kOp, "sampling_locations");
  check_dim(attention_weights, 5, kOp, "attention_weights");
  check_floating(value, kOp, "value");
  // Sampling locations and attention weights may come in value's dtype or
  // in its compute dtype (float32 beside 16-bit value: what an AMP step
  // produces). The kernels read them in the compute dtype, so a location is
  // never rounded to 16 bits (bfloat16 would leave ~0.4 px on a 200-px map).
  const at::ScalarType compute = at::toOpMathType(value.scalar_type());
  for (const auto& [t, name] :
       {std::pair<const at::Tensor&, const char*>{sampling_locations,
                                                  "sampling_locations"},
        {attention_weights, "attention_weights"}}) {
    TORCH_CHECK(t.scalar_type() == value.scalar_type() ||
                    t.scalar_type() == compute,
                kOp, ": ", name, " must have the dtype of value (",
                value.scalar_type(), ") or ", compute, ", got ",
                t.scalar_type());
  }
  check_same_device(value, sampling_locations, kOp, "value",
                    "sampling_locations");
  check_same_device(value, attention_weights, kOp, "value",
                    "attention_weights");
  for (const auto& [t, name] :
       {std::pair<const at::Tensor&, const char*>{spatial_shapes,
                                                  "value_spatial_shapes"},
        {level_start_index, "value_level_start_index"}}) {
    check_integer(t, kOp, name);
    TORCH_CHECK(t.device() == value.device() || t.device().is_cpu(), kOp,
                ": ", name, " must be on the device of value (", value.device(),
                ") or on the CPU, got ", t.device());
  }
  const int64_t B = value.size(0), M = value.size(2);
  const int64_t L = spatial_shapes.size(0);
  TORCH_CHECK(level_start_index.size(0) == L, kOp,
              ": value_level_start_index must have shape [num_levels] = [", L,
              "], got ", level_start_index.sizes());
  const auto& ls = sampling_locations.sizes();
  TORCH_CHECK(ls[0] == B && ls[2] == M && ls[3] == L && ls[5] == 2, kOp,
              ": sampling_locations must have shape [bs, num_queries, "
              "num_heads, num_levels, num_points, 2] = [",
              B, ", Q, ", M, ", ", L, ", P, 2], got ", ls);
  const auto& as = attention_weights.sizes();
  TORCH_CHECK(as[0] == B && as[1] == ls[1] && as[2] == M && as[3] == L &&
                  as[4] == ls[4],
              kOp,
              ": attention_weights must have shape [bs, num_queries, "
              "num_heads, num_levels, num_points] = ",
              ls.slice(0, 5), ", got ", as);
  TORCH_CHECK(im2col_step > 0, kOp, ": im2col_step must be positive, got ",
              im2col_step);
  // mmcv's rule: the batch is processed in chunks of min(im2col_step, bs).
  if (B > 0) {
    const int64_t step = std::min(B, im2col_step);
    TORCH_CHECK(B % step == 0, kOp, ": the batch size (", B,
                ") must be divisible by min(im2col_step, batch size) = ", step,
                " (mmcv's rule)");
  }
}

// Every level must lie inside the keys, and the levels must cover them:
// sum(H * W) == num_keys. One host read of the level tables.
void check_levels(const at::Tensor& spatial_shapes,
                  const at::Tensor& level_start_index, int64_t num_keys) {
  const int64_t L = spatial_shapes.size(0);
  if (L == 0) {
    TORCH_CHECK(num_keys == 0, kOp,
                ": value_spatial_shapes has no levels but value has ",
                num_keys, " keys");
    return;
  }
  // One copy when both tables live on the same device.
  const at::Tensor host =
      spatial_shapes.device() == level_start_index.device()
          ? at::cat({spatial_shapes.reshape({-1}).to(at::kLong),
                     level_start_index.to(at::kLong)})
                .to(at::kCPU)
          : at::cat({spatial_shapes.reshape({-1}).to(at::kCPU, at::kLong),
                     level_start_index.to(at::kCPU, at::kLong)});
  const int64_t* shapes = host.data_ptr<int64_t>();
  const int64_t* start = shapes + 2 * L;
  int64_t total = 0;
  for (int64_t l = 0; l < L; ++l) {
    const int64_t h = shapes[2 * l], w = shapes[2 * l + 1];
    TORCH_CHECK(h >= 0 && w >= 0, kOp,
                ": value_spatial_shapes must be non-negative, got (", h, ", ",
                w, ") at level ", l);
    TORCH_CHECK(h == 0 || w <= num_keys / h, kOp,
                ": level ", l, " of value_spatial_shapes (", h, ", ", w,
                ") has more positions than value has keys (", num_keys, ")");
    const int64_t size = h * w;
    TORCH_CHECK(start[l] >= 0 && start[l] <= num_keys - size, kOp,
                ": value_level_start_index[", l, "] = ", start[l],
                " puts level ", l, " (", h, "x", w,
                ") outside the keys of value [0, ", num_keys, ")");
    total += size;
    TORCH_CHECK(total <= num_keys, kOp,
                ": value_spatial_shapes cover more positions than value has "
                "keys (", num_keys, ")");
  }
  TORCH_CHECK(total == num_keys, kOp,
              ": value_spatial_shapes must cover every key of value: "
              "sum(H * W) = ", total, " but value has ", num_keys,
              " keys (dim 1)");
}

// A CPU table goes to the GPU without a stream sync (a pageable copy is
// staged before cudaMemcpyAsync returns).
at::Tensor level_table(const at::Tensor& t, const at::Device& device) {
  return t.to(at::kLong).contiguous().to(device, at::kLong,
                                        /*non_blocking=*/true);
}

}  // namespace

MSDAInputs msda_prepare(const at::Tensor& value,
                        const at::Tensor& spatial_shapes,
                        const at::Tensor& level_start_index,
                        const at::Tensor& sampling_locations,
                        const at::Tensor& attention_weights,
                        int64_t im2col_step) {
  check_shapes(value, spatial_shapes, level_start_index, sampling_locations,
               attention_weights, im2col_step);
  // Reading tables that live on a GPU is a device-to-host wait: only on
  // request. Without it the CUDA kernels bounds-check every level (NaN output
  // for a level outside value's keys, no gradient from it).
  if (spatial_shapes.device().is_cpu() || level_start_index.device().is_cpu() ||
      sync_checks_enabled("VISDET_OPS_SYNC_LEVEL_CHECKS")) {
    check_levels(spatial_shapes, level_start_index, value.size(1));
  }
  MSDAInputs in;
  in.shape = MSDAShape{value.size(0),
                       value.size(1),
                       value.size(2),
                       value.size(3),
                       sampling_locations.size(1),
                       spatial_shapes.size(0),
                       sampling_locations.size(4)};
  in.value = value.contiguous();
  in.spatial_shapes = level_table(spatial_shapes, value.device());
  in.level_start_index = level_table(level_start_index, value.device());
  const at::ScalarType compute = at::toOpMathType(value.scalar_type());
  in.sampling_locations = sampling_locations.to(compute).contiguous();
  in.attention_weights = attention_weights.to(compute).contiguous();
  return in;
}

MSDAInputs msda_prepare_backward(const at::Tensor& grad_output,
                                 const at::Tensor& value,
                                 const at::Tensor& spatial_shapes,
                                 const at::Tensor& level_start_index,
                                 const at::Tensor& sampling_locations,
                                 const at::Tensor& attention_weights,
                                 int64_t im2col_step,
                                 at::Tensor* grad_output_contiguous) {
  MSDAInputs in = msda_prepare(value, spatial_shapes, level_start_index,
                               sampling_locations, attention_weights,
                               im2col_step);
  const MSDAShape& s = in.shape;
  check_same_dtype(grad_output, value, kOp, "grad_output", "value");
  check_same_device(grad_output, value, kOp, "grad_output", "value");
  TORCH_CHECK(grad_output.dim() == 3 && grad_output.size(0) == s.batch &&
                  grad_output.size(1) == s.num_queries &&
                  grad_output.size(2) == s.num_heads * s.head_dim,
              kOp, ": grad_output must have shape [", s.batch, ", ",
              s.num_queries, ", ", s.num_heads * s.head_dim, "], got ",
              grad_output.sizes());
  *grad_output_contiguous = grad_output.contiguous();
  return in;
}

namespace {

at::Tensor msda_forward_cpu_kernel(const at::Tensor& value,
                                   const at::Tensor& spatial_shapes,
                                   const at::Tensor& level_start_index,
                                   const at::Tensor& sampling_locations,
                                   const at::Tensor& attention_weights,
                                   int64_t im2col_step) {
  const MSDAInputs in =
      msda_prepare(value, spatial_shapes, level_start_index,
                   sampling_locations, attention_weights, im2col_step);
  const MSDAShape& s = in.shape;
  // Every row is written by the kernel (zeros where no sample counts).
  at::Tensor output = at::empty(
      {s.batch, s.num_queries, s.num_heads * s.head_dim}, value.options());
  if (output.numel() == 0) return output;
  // float16/bfloat16 value is read directly (no float32 copy) and sampled in
  // float; sampling locations and attention weights are in the compute dtype.
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, value.scalar_type(), "msda_forward_cpu", [&] {
        using T = host_t<scalar_t>;
        using A = acc_t<T>;
        const T* v = host_data<scalar_t>(in.value);
        const int64_t* shapes = in.spatial_shapes.const_data_ptr<int64_t>();
        const int64_t* start = in.level_start_index.const_data_ptr<int64_t>();
        const A* loc = in.sampling_locations.const_data_ptr<A>();
        const A* attn = in.attention_weights.const_data_ptr<A>();
        T* out = host_mutable_data<scalar_t>(output);
        const int64_t work = std::max<int64_t>(
            1, s.num_levels * s.num_points * s.head_dim);
        const int64_t grain = std::max<int64_t>(1, 32768 / work);
        at::parallel_for(0, s.rows(), grain, [&](int64_t begin, int64_t end) {
          msda_forward_cpu<T>(v, shapes, start, loc, attn, s, begin, end, out);
        });
      });
  return output;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> msda_backward_cpu_kernel(
    const at::Tensor& grad_output, const at::Tensor& value,
    const at::Tensor& spatial_shapes, const at::Tensor& level_start_index,
    const at::Tensor& sampling_locations, const at::Tensor& attention_weights,
    int64_t im2col_step) {
  at::Tensor go;
  const MSDAInputs in = msda_prepare_backward(
      grad_output, value, spatial_shapes, level_start_index,
      sampling_locations, attention_weights, im2col_step, &go);
  const MSDAShape& s = in.shape;
  // Accumulated in the compute dtype (float32 for 16-bit value), each
  // gradient returned in its argument's dtype (rounded once).
  at::Tensor grad_value = at::zeros(
      in.value.sizes(),
      in.value.options().dtype(at::toOpMathType(value.scalar_type())));
  at::Tensor grad_loc = at::zeros_like(in.sampling_locations);
  at::Tensor grad_attn = at::zeros_like(in.attention_weights);
  if (go.numel() > 0) {
    AT_DISPATCH_FLOATING_TYPES_AND2(
        at::kHalf, at::kBFloat16, value.scalar_type(), "msda_backward_cpu",
        [&] {
          using T = host_t<scalar_t>;
          using A = acc_t<T>;
          const T* g = host_data<scalar_t>(go);
          const T* v = host_data<scalar_t>(in.value);
          const int64_t* shapes = in.spatial_shapes.const_data_ptr<int64_t>();
          const int64_t* start = in.level_start_index.const_data_ptr<int64_t>();
          const A* loc = in.sampling_locations.const_data_ptr<A>();
          const A* attn = in.attention_weights.const_data_ptr<A>();
          A* gv = grad_value.mutable_data_ptr<A>();
          A* gl = grad_loc.mutable_data_ptr<A>();
          A* ga = grad_attn.mutable_data_ptr<A>();
          at::parallel_for(0, s.batch * s.num_heads, 1,
                           [&](int64_t begin, int64_t end) {
                             msda_backward_cpu<T>(g, v, shapes, start, loc,
                                                  attn, s, begin, end, gv, gl,
                                                  ga);
                           });
        });
  }
  return {to_dtype_of(grad_value, value),
          to_dtype_of(grad_loc, sampling_locations),
          to_dtype_of(grad_attn, attention_weights)};
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(visdet_ops, m) {
  m.def(
      "multi_scale_deformable_attn(Tensor value, Tensor value_spatial_shapes, "
      "Tensor value_level_start_index, Tensor sampling_locations, "
      "Tensor attention_weights, int im2col_step) -> Tensor");
  m.def(
      "_multi_scale_deformable_attn_backward(Tensor grad_output, "
      "Tensor value, Tensor value_spatial_shapes, "
      "Tensor value_level_start_index, Tensor sampling_locations, "
      "Tensor attention_weights, int im2col_step) -> (Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(visdet_ops, CPU, m) {
  m.impl("multi_scale_deformable_attn", &msda_forward_cpu_kernel);
  m.impl("_multi_scale_deformable_attn_backward", &msda_backward_cpu_kernel);
}

}  // namespace visdet_ops
