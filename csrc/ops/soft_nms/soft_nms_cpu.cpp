#include <cstddef>
#include <vector>

#include "soft_nms_kernel.h"
#include "soft_nms_launch.h"

namespace visdet_ops {

template <typename T>
void soft_nms_cpu(const T* boxes, const T* scores, const int64_t* offsets,
                  int64_t num_segments, SoftNmsParams<T> params,
                  int64_t* picked, T* picked_scores, int64_t* counts) {
  using namespace soft_nms_detail;
  std::vector<T> score;
  std::vector<int64_t> live;  // positions still in the running, compacted
  for (int64_t s = 0; s < num_segments; ++s) {
    const int64_t start = offsets[s];
    const int64_t len = offsets[s + 1] - start;
    score.assign(scores + start, scores + start + len);
    live.clear();
    for (int64_t j = 0; j < len; ++j) {
      if (alive(score[static_cast<std::size_t>(j)])) live.push_back(j);
    }
    int64_t count = 0;
    int64_t pick = -1;
    while (!live.empty()) {
      T best = T(0);
      int64_t best_pos = -1;
      std::size_t kept = 0;
      for (const int64_t j : live) {
        if (j == pick) continue;
        T sc = score[static_cast<std::size_t>(j)];
        if (pick >= 0) {
          const T ovr = iou(boxes + 4 * (start + pick), boxes + 4 * (start + j),
                            params.offset);
          sc *= weight(ovr, params.method, params.iou_threshold, params.sigma);
          if (!(sc >= params.min_score)) continue;  // dropped (NaN too)
          score[static_cast<std::size_t>(j)] = sc;
        }
        live[kept++] = j;
        if (better(sc, j, best, best_pos)) {
          best = sc;
          best_pos = j;
        }
      }
      live.resize(kept);
      if (best_pos < 0) break;
      picked[start + count] = start + best_pos;
      picked_scores[start + count] = best;
      ++count;
      pick = best_pos;
    }
    counts[s] = count;
  }
}

template void soft_nms_cpu<float>(const float*, const float*, const int64_t*,
                                  int64_t, SoftNmsParams<float>, int64_t*,
                                  float*, int64_t*);
template void soft_nms_cpu<double>(const double*, const double*,
                                   const int64_t*, int64_t,
                                   SoftNmsParams<double>, int64_t*, double*,
                                   int64_t*);

}  // namespace visdet_ops
