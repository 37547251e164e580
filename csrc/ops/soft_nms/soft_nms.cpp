// soft_nms: schema, argument checks shared by all devices, CPU registration.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <cmath>

#include "common/checks.h"
#include "ops/nms/nms.h"
#include "soft_nms.h"
#include "soft_nms_kernel.h"
#include "soft_nms_launch.h"

namespace visdet_ops {

SoftNmsPrepared soft_nms_prepare(const at::Tensor& boxes,
                                 const at::Tensor& scores, double iou_threshold,
                                 double sigma, double min_score,
                                 int64_t method, int64_t offset,
                                 const c10::optional<at::Tensor>& idxs) {
  constexpr const char* op = "soft_nms";
  check_nms_inputs(op, boxes, scores, idxs, iou_threshold, offset);
  TORCH_CHECK(method == soft_nms_detail::kNaive ||
                  method == soft_nms_detail::kLinear ||
                  method == soft_nms_detail::kGaussian,
              op, ": method must be 0 (naive), 1 (linear) or 2 (gaussian), got ",
              method);
  TORCH_CHECK(!std::isnan(min_score), op,
              ": min_score must be a number, got nan");
  TORCH_CHECK(method != soft_nms_detail::kGaussian || sigma > 0, op,
              ": sigma must be > 0 for the gaussian method, got ", sigma);

  SoftNmsPrepared p;
  p.n = boxes.size(0);
  if (p.n == 0) return p;
  const at::ScalarType compute =
      boxes.scalar_type() == at::kDouble || scores.scalar_type() == at::kDouble
          ? at::kDouble
          : at::kFloat;
  at::Tensor b = boxes, s = scores;
  if (idxs.has_value()) {
    // Stable: within a class, positions keep input order (the tie-break).
    auto sorted = idxs->to(at::kLong).sort(/*stable=*/true, /*dim=*/0,
                                           /*descending=*/false);
    p.order = std::get<1>(sorted);
    b = b.index_select(0, p.order);
    s = s.index_select(0, p.order);
    const at::Tensor lengths =
        std::get<2>(at::unique_consecutive(std::get<0>(sorted),
                                           /*return_inverse=*/false,
                                           /*return_counts=*/true))
            .cpu();
    p.num_segments = lengths.size(0);
    p.offsets = at::zeros({p.num_segments + 1}, lengths.options());
    p.offsets.narrow(0, 1, p.num_segments).copy_(lengths.cumsum(0));
    p.max_len = lengths.max().item<int64_t>();
  } else {
    p.num_segments = 1;
    p.offsets = at::tensor({int64_t{0}, p.n}, at::kLong);
    p.max_len = p.n;
  }
  p.boxes = b.to(compute).contiguous();
  p.scores = s.to(compute).contiguous();
  return p;
}

std::tuple<at::Tensor, at::Tensor> soft_nms_finish(
    const SoftNmsPrepared& p, const at::Tensor& picked,
    const at::Tensor& picked_scores, const at::Tensor& counts,
    at::ScalarType dtype) {
  at::Tensor pos, sc;
  if (p.num_segments == 1) {
    const int64_t k = counts.cpu().item<int64_t>();
    pos = picked.narrow(0, 0, k);
    sc = picked_scores.narrow(0, 0, k);
  } else {
    // Entries [offsets[s], offsets[s] + counts[s]) of each segment are valid.
    const at::Tensor offsets = p.offsets.to(picked.device());
    const at::Tensor lengths = offsets.narrow(0, 1, p.num_segments) -
                               offsets.narrow(0, 0, p.num_segments);
    const at::Tensor segment = at::repeat_interleave(
        at::arange(p.num_segments, offsets.options()), lengths, /*dim=*/0,
        /*output_size=*/p.n);
    const at::Tensor local =
        at::arange(p.n, offsets.options()) - offsets.index_select(0, segment);
    const at::Tensor valid = local < counts.index_select(0, segment);
    pos = picked.masked_select(valid);
    sc = picked_scores.masked_select(valid);
  }
  at::Tensor inds = p.order.defined() ? p.order.index_select(0, pos) : pos;
  if (p.num_segments > 1) {
    // Merge the classes: descending score, ties by input index.
    const at::Tensor by_index =
        std::get<1>(inds.sort(/*stable=*/true, 0, /*descending=*/false));
    inds = inds.index_select(0, by_index);
    sc = sc.index_select(0, by_index);
    const at::Tensor by_score =
        std::get<1>(sc.sort(/*stable=*/true, 0, /*descending=*/true));
    inds = inds.index_select(0, by_score);
    sc = sc.index_select(0, by_score);
  }
  return {inds, sc.to(dtype)};
}

std::tuple<at::Tensor, at::Tensor> soft_nms_empty(const at::Tensor& boxes) {
  return {at::empty({0}, boxes.options().dtype(at::kLong)),
          at::empty({0}, boxes.options())};
}

namespace {

std::tuple<at::Tensor, at::Tensor> soft_nms_cpu_kernel(
    const at::Tensor& boxes, const at::Tensor& scores, double iou_threshold,
    double sigma, double min_score, int64_t method, int64_t offset,
    const c10::optional<at::Tensor>& idxs) {
  const SoftNmsPrepared p = soft_nms_prepare(
      boxes, scores, iou_threshold, sigma, min_score, method, offset, idxs);
  TORCH_CHECK(boxes.device().is_cpu(),
              "soft_nms: the CPU kernel needs CPU tensors, got boxes on ",
              boxes.device());
  if (p.n == 0) return soft_nms_empty(boxes);
  at::Tensor picked = at::empty({p.n}, p.offsets.options());
  at::Tensor picked_scores = at::empty({p.n}, p.scores.options());
  at::Tensor counts = at::empty({p.num_segments}, p.offsets.options());
  AT_DISPATCH_FLOATING_TYPES(p.boxes.scalar_type(), "soft_nms_cpu", [&] {
    const SoftNmsParams<scalar_t> params{
        static_cast<scalar_t>(iou_threshold), static_cast<scalar_t>(sigma),
        static_cast<scalar_t>(min_score), static_cast<scalar_t>(offset),
        static_cast<int>(method)};
    soft_nms_cpu<scalar_t>(p.boxes.data_ptr<scalar_t>(),
                           p.scores.data_ptr<scalar_t>(),
                           p.offsets.data_ptr<int64_t>(), p.num_segments,
                           params, picked.data_ptr<int64_t>(),
                           picked_scores.data_ptr<scalar_t>(),
                           counts.data_ptr<int64_t>());
  });
  return soft_nms_finish(p, picked, picked_scores, counts,
                         boxes.scalar_type());
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(visdet_ops, m) {
  // Returns (kept input indices, their scores after decay), in descending
  // score order. With idxs, only boxes of one class decay each other.
  m.def(
      "soft_nms(Tensor boxes, Tensor scores, float iou_threshold, "
      "float sigma, float min_score, int method, int offset=0, "
      "Tensor? idxs=None) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(visdet_ops, CPU, m) {
  m.impl("soft_nms", &soft_nms_cpu_kernel);
}

}  // namespace visdet_ops
