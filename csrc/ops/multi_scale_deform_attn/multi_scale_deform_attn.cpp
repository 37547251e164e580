// multi_scale_deformable_attn: schema, and the argument checks and prepare
// steps shared by all devices. Each device registers from its own host file:
// multi_scale_deform_attn_cpu_host.cpp and
// multi_scale_deform_attn_cuda_host.cpp. One source for the classic and the
// stable build (common/host.h). Autograd, autocast and the CUDA backward's
// determinism alert are registered in
// visdet_ops/ops/multi_scale_deform_attn.py.
#include "multi_scale_deform_attn.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "common/checks.h"
#include "common/host.h"

namespace visdet_ops {
namespace {

using host::ScalarType;
using host::Tensor;

constexpr const char* kOp = "multi_scale_deformable_attn";

void check_shapes(const Tensor& value, const Tensor& spatial_shapes,
                  const Tensor& level_start_index,
                  const Tensor& sampling_locations,
                  const Tensor& attention_weights, int64_t im2col_step) {
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
  const ScalarType dtype = host::dtype_of(value);
  const ScalarType compute = host::compute_dtype(dtype);
  for (const auto& [t, name] :
       {std::pair<const Tensor&, const char*>{sampling_locations,
                                              "sampling_locations"},
        {attention_weights, "attention_weights"}}) {
    VISDET_CHECK(host::dtype_of(t) == dtype || host::dtype_of(t) == compute,
                 kOp, ": ", name, " must have the dtype of value (", dtype,
                 ") or ", compute, ", got ", host::dtype_of(t));
  }
  check_same_device(value, sampling_locations, kOp, "value",
                    "sampling_locations");
  check_same_device(value, attention_weights, kOp, "value",
                    "attention_weights");
  for (const auto& [t, name] :
       {std::pair<const Tensor&, const char*>{spatial_shapes,
                                              "value_spatial_shapes"},
        {level_start_index, "value_level_start_index"}}) {
    check_integer(t, kOp, name);
    VISDET_CHECK(host::same_device(t, value) || host::is_cpu(t), kOp, ": ",
                 name, " must be on the device of value (",
                 host::device_of(value), ") or on the CPU, got ",
                 host::device_of(t));
  }
  const int64_t B = value.size(0), M = value.size(2);
  const int64_t L = spatial_shapes.size(0);
  VISDET_CHECK(level_start_index.size(0) == L, kOp,
               ": value_level_start_index must have shape [num_levels] = [", L,
               "], got ", host::shape_of(level_start_index));
  const host::ShapeText ls = host::shape_of(sampling_locations);
  const std::vector<int64_t>& l = ls.sizes;
  VISDET_CHECK(l[0] == B && l[2] == M && l[3] == L && l[5] == 2, kOp,
               ": sampling_locations must have shape [bs, num_queries, "
               "num_heads, num_levels, num_points, 2] = [",
               B, ", Q, ", M, ", ", L, ", P, 2], got ", ls);
  const host::ShapeText as = host::shape_of(attention_weights);
  const std::vector<int64_t>& a = as.sizes;
  VISDET_CHECK(a[0] == B && a[1] == l[1] && a[2] == M && a[3] == L &&
                   a[4] == l[4],
               kOp,
               ": attention_weights must have shape [bs, num_queries, "
               "num_heads, num_levels, num_points] = ",
               host::ShapeText{{l.begin(), l.begin() + 5}}, ", got ", as);
  VISDET_CHECK(im2col_step > 0, kOp, ": im2col_step must be positive, got ",
               im2col_step);
  // mmcv's rule: the batch is processed in chunks of min(im2col_step, bs).
  if (B > 0) {
    const int64_t step = std::min(B, im2col_step);
    VISDET_CHECK(B % step == 0, kOp, ": the batch size (", B,
                 ") must be divisible by min(im2col_step, batch size) = ",
                 step, " (mmcv's rule)");
  }
}

// Every level must lie inside the keys, and the levels must cover them:
// sum(H * W) == num_keys. One host read of the level tables.
void check_levels(const Tensor& spatial_shapes,
                  const Tensor& level_start_index, int64_t num_keys) {
  const int64_t L = spatial_shapes.size(0);
  if (L == 0) {
    VISDET_CHECK(num_keys == 0, kOp,
                 ": value_spatial_shapes has no levels but value has ",
                 num_keys, " keys");
    return;
  }
  const Tensor shapes_long = host::contiguous(
      host::to_dtype(spatial_shapes, ScalarType::Long));
  const Tensor start_long =
      host::contiguous(host::to_dtype(level_start_index, ScalarType::Long));
  // CPU tables (the usual case here: GPU tables are read only on request) are
  // read where they are; GPU tables come over in one copy.
  const bool on_cpu = host::is_cpu(shapes_long) && host::is_cpu(start_long);
  const Tensor shapes_host =
      on_cpu ? shapes_long
             : host::to_cpu(
                   host::same_device(shapes_long, start_long)
                       ? host::cat({host::flatten(shapes_long), start_long})
                       : host::cat({host::flatten(host::to_cpu(shapes_long)),
                                    host::to_cpu(start_long)}));
  const int64_t* shapes = host::const_data<int64_t>(shapes_host);
  const int64_t* start =
      on_cpu ? host::const_data<int64_t>(start_long) : shapes + 2 * L;
  int64_t total = 0;
  for (int64_t l = 0; l < L; ++l) {
    const int64_t h = shapes[2 * l], w = shapes[2 * l + 1];
    VISDET_CHECK(h >= 0 && w >= 0, kOp,
                 ": value_spatial_shapes must be non-negative, got (", h, ", ",
                 w, ") at level ", l);
    VISDET_CHECK(h == 0 || w <= num_keys / h, kOp, ": level ", l,
                 " of value_spatial_shapes (", h, ", ", w,
                 ") has more positions than value has keys (", num_keys, ")");
    const int64_t size = h * w;
    VISDET_CHECK(start[l] >= 0 && start[l] <= num_keys - size, kOp,
                 ": value_level_start_index[", l, "] = ", start[l],
                 " puts level ", l, " (", h, "x", w,
                 ") outside the keys of value [0, ", num_keys, ")");
    total += size;
    VISDET_CHECK(total <= num_keys, kOp,
                 ": value_spatial_shapes cover more positions than value has "
                 "keys (",
                 num_keys, ")");
  }
  VISDET_CHECK(total == num_keys, kOp,
               ": value_spatial_shapes must cover every key of value: "
               "sum(H * W) = ",
               total, " but value has ", num_keys, " keys (dim 1)");
}

// A CPU table goes to the GPU without a stream sync (a pageable copy is
// staged before cudaMemcpyAsync returns).
Tensor level_table(const Tensor& t, const Tensor& value) {
  return host::to_device(
      host::contiguous(host::to_dtype(t, ScalarType::Long)), value,
      /*non_blocking=*/true);
}

// The checked, contiguous inputs (the fields that MSDAForward and
// MSDABackward share).
template <typename Prepared>
void prepare_inputs(Prepared& p, const Tensor& value,
                    const Tensor& spatial_shapes,
                    const Tensor& level_start_index,
                    const Tensor& sampling_locations,
                    const Tensor& attention_weights, int64_t im2col_step) {
  check_shapes(value, spatial_shapes, level_start_index, sampling_locations,
               attention_weights, im2col_step);
  // Reading tables that live on a GPU is a device-to-host wait: only on
  // request. Without it the CUDA kernels bounds-check every level (NaN output
  // for a level outside value's keys, no gradient from it).
  if (host::is_cpu(spatial_shapes) || host::is_cpu(level_start_index) ||
      sync_checks_enabled("VISDET_OPS_SYNC_LEVEL_CHECKS")) {
    check_levels(spatial_shapes, level_start_index, value.size(1));
  }
  p.shape = MSDAShape{value.size(0),
                      value.size(1),
                      value.size(2),
                      value.size(3),
                      sampling_locations.size(1),
                      spatial_shapes.size(0),
                      sampling_locations.size(4)};
  p.value = host::contiguous(value);
  p.spatial_shapes = level_table(spatial_shapes, value);
  p.level_start_index = level_table(level_start_index, value);
  const ScalarType compute = host::compute_dtype(host::dtype_of(value));
  p.sampling_locations =
      host::contiguous(host::to_dtype(sampling_locations, compute));
  p.attention_weights =
      host::contiguous(host::to_dtype(attention_weights, compute));
}

}  // namespace

MSDAForward msda_prepare_forward(const Tensor& value,
                                 const Tensor& spatial_shapes,
                                 const Tensor& level_start_index,
                                 const Tensor& sampling_locations,
                                 const Tensor& attention_weights,
                                 int64_t im2col_step) {
  MSDAForward f;
  prepare_inputs(f, value, spatial_shapes, level_start_index,
                 sampling_locations, attention_weights, im2col_step);
  const MSDAShape& s = f.shape;
  // Every row is written by the kernels (zeros where no sample counts).
  f.output = host::empty({s.batch, s.num_queries, s.num_heads * s.head_dim},
                         host::dtype_of(value), value);
  return f;
}

MSDABackward msda_prepare_backward(const Tensor& grad_output,
                                   const Tensor& value,
                                   const Tensor& spatial_shapes,
                                   const Tensor& level_start_index,
                                   const Tensor& sampling_locations,
                                   const Tensor& attention_weights,
                                   int64_t im2col_step) {
  MSDABackward b;
  prepare_inputs(b, value, spatial_shapes, level_start_index,
                 sampling_locations, attention_weights, im2col_step);
  const MSDAShape& s = b.shape;
  check_same_dtype(grad_output, value, kOp, "grad_output", "value");
  check_same_device(grad_output, value, kOp, "grad_output", "value");
  VISDET_CHECK(grad_output.dim() == 3 && grad_output.size(0) == s.batch &&
                   grad_output.size(1) == s.num_queries &&
                   grad_output.size(2) == s.num_heads * s.head_dim,
               kOp, ": grad_output must have shape [", s.batch, ", ",
               s.num_queries, ", ", s.num_heads * s.head_dim, "], got ",
               host::shape_of(grad_output));
  b.grad_output = host::contiguous(grad_output);
  b.value_dtype = host::dtype_of(value);
  b.sampling_locations_dtype = host::dtype_of(sampling_locations);
  b.attention_weights_dtype = host::dtype_of(attention_weights);
  const ScalarType compute = host::compute_dtype(b.value_dtype);
  b.grad_value = host::zeros(
      {s.batch, s.num_keys, s.num_heads, s.head_dim}, compute, value);
  b.grad_sampling_locations =
      host::zeros({s.batch, s.num_queries, s.num_heads, s.num_levels,
                   s.num_points, 2},
                  compute, value);
  b.grad_attention_weights = host::zeros(
      {s.batch, s.num_queries, s.num_heads, s.num_levels, s.num_points},
      compute, value);
  return b;
}

std::tuple<Tensor, Tensor, Tensor> MSDABackward::grads() const {
  // Each gradient in its argument's dtype: float32 sampling locations and
  // attention weights beside 16-bit value keep float32 gradients.
  return {host::to_dtype(grad_value, value_dtype),
          host::to_dtype(grad_sampling_locations, sampling_locations_dtype),
          host::to_dtype(grad_attention_weights, attention_weights_dtype)};
}

VISDET_LIBRARY_FRAGMENT(m) {
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

}  // namespace visdet_ops
