// soft_nms: schema, and the argument checks and prepare and finishing steps
// shared by all devices. Each device registers from its own host file:
// soft_nms_cpu_host.cpp and soft_nms_cuda_host.cpp. One source for the
// classic and the stable build (common/host.h). Autocast is registered in
// visdet_ops/ops/soft_nms.py.
#include "soft_nms.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <tuple>

#include "common/checks.h"
#include "common/host.h"
#include "ops/_boxes/boxes.h"
#include "soft_nms_kernel.h"

namespace visdet_ops {

using host::ScalarType;
using host::Tensor;

namespace {

constexpr const char* kOp = "soft_nms";

int parse_method(host::StringArg method) {
  if (method == "naive") return soft_nms_detail::kNaive;
  if (method == "linear") return soft_nms_detail::kLinear;
  if (method == "gaussian") return soft_nms_detail::kGaussian;
  VISDET_CHECK(false, kOp,
               ": method must be 'naive', 'linear' or 'gaussian', got '",
               std::string(method), "'");
  return soft_nms_detail::kLinear;  // not reached
}

}  // namespace

SoftNmsPrepared soft_nms_prepare(const Tensor& boxes, const Tensor& scores,
                                 double iou_threshold, double sigma,
                                 double min_score, host::StringArg method,
                                 int64_t offset,
                                 const std::optional<Tensor>& idxs) {
  check_nms_inputs(kOp, boxes, scores, idxs, iou_threshold, offset);
  SoftNmsPrepared p;
  p.method = parse_method(method);
  VISDET_CHECK(!std::isnan(min_score), kOp,
               ": min_score must be a number, got nan");
  VISDET_CHECK(p.method != soft_nms_detail::kGaussian || sigma > 0, kOp,
               ": sigma must be > 0 for the gaussian method, got ", sigma);

  p.n = boxes.size(0);
  if (p.n == 0) return p;
  const ScalarType compute = host::dtype_of(boxes) == ScalarType::Double ||
                                     host::dtype_of(scores) == ScalarType::Double
                                 ? ScalarType::Double
                                 : ScalarType::Float;
  Tensor b = boxes, s = scores;
  if (idxs.has_value()) {
    // Stable: within a class, positions keep input order (the tie-break).
    const auto sorted = host::sort_stable(
        host::to_dtype(*idxs, ScalarType::Long), /*descending=*/false);
    p.order = std::get<1>(sorted);
    p.has_order = true;
    b = host::index_select(b, 0, p.order);
    s = host::index_select(s, 0, p.order);
    // The class lengths are read on the host (a device sync on CUDA, as
    // before): the segment table lives on the CPU.
    const Tensor lengths = host::contiguous(
        host::to_cpu(host::unique_consecutive_counts(std::get<0>(sorted))));
    p.num_segments = lengths.size(0);
    const int64_t* length = host::const_data<int64_t>(lengths);
    p.offsets = host::empty_cpu({p.num_segments + 1}, ScalarType::Long);
    int64_t* start = host::mutable_data<int64_t>(p.offsets);
    start[0] = 0;
    for (int64_t i = 0; i < p.num_segments; ++i) {
      start[i + 1] = start[i] + length[i];
      p.max_len = std::max(p.max_len, length[i]);
    }
  } else {
    p.num_segments = 1;
    p.offsets = host::empty_cpu({2}, ScalarType::Long);
    int64_t* start = host::mutable_data<int64_t>(p.offsets);
    start[0] = 0;
    start[1] = p.n;
    p.max_len = p.n;
  }
  p.boxes = host::contiguous(host::to_dtype(b, compute));
  p.scores = host::contiguous(host::to_dtype(s, compute));
  return p;
}

std::tuple<Tensor, Tensor> soft_nms_finish(const SoftNmsPrepared& p,
                                           const Tensor& picked,
                                           const Tensor& picked_scores,
                                           const Tensor& counts,
                                           ScalarType dtype) {
  Tensor pos, sc;
  if (p.num_segments == 1) {
    const int64_t k = host::read_scalar<int64_t>(counts);
    pos = host::narrow(picked, 0, 0, k);
    sc = host::narrow(picked_scores, 0, 0, k);
  } else {
    // Entries [offsets[s], offsets[s] + counts[s]) of each segment are valid:
    // their positions, in increasing order, gathered on the host from the
    // segment table (counts: one device-to-host copy on CUDA).
    const Tensor kept = host::contiguous(host::to_cpu(counts));
    const int64_t* count = host::const_data<int64_t>(kept);
    const int64_t* start = host::const_data<int64_t>(p.offsets);
    int64_t total = 0;
    for (int64_t s = 0; s < p.num_segments; ++s) total += count[s];
    const Tensor valid = host::empty_cpu({total}, ScalarType::Long);
    int64_t* out = host::mutable_data<int64_t>(valid);
    for (int64_t s = 0; s < p.num_segments; ++s) {
      for (int64_t k = 0; k < count[s]; ++k) *out++ = start[s] + k;
    }
    const Tensor index = host::to_device(valid, picked, /*non_blocking=*/false);
    pos = host::index_select(picked, 0, index);
    sc = host::index_select(picked_scores, 0, index);
  }
  Tensor inds = p.has_order ? host::index_select(p.order, 0, pos) : pos;
  if (p.num_segments > 1) {
    // Merge the classes: descending score, ties by input index.
    const Tensor by_index =
        std::get<1>(host::sort_stable(inds, /*descending=*/false));
    inds = host::index_select(inds, 0, by_index);
    sc = host::index_select(sc, 0, by_index);
    const Tensor by_score = host::sort_descending_stable_indices(sc);
    inds = host::index_select(inds, 0, by_score);
    sc = host::index_select(sc, 0, by_score);
  }
  return {inds, host::to_dtype(sc, dtype)};
}

std::tuple<Tensor, Tensor> soft_nms_empty(const Tensor& boxes) {
  return {host::empty({0}, ScalarType::Long, boxes),
          host::empty({0}, host::dtype_of(boxes), boxes)};
}

VISDET_LIBRARY_FRAGMENT(m) {
  // Returns (kept input indices, their scores after decay), in descending
  // score order. With idxs, only boxes of one class decay each other.
  // method: 'naive', 'linear' or 'gaussian'.
  m.def(
      "soft_nms(Tensor boxes, Tensor scores, float iou_threshold, "
      "float sigma, float min_score, str method, int offset=0, "
      "Tensor? idxs=None) -> (Tensor, Tensor)");
}

}  // namespace visdet_ops
