// CPU corner pooling: for each outer row, the scan walks the length axis and
// handles the `inner` lanes of one step together (contiguous, so H pools
// stream through memory row by row instead of striding down columns).
#include <vector>

#include "corner_pool_kernel.h"
#include "corner_pool_launch.h"

namespace visdet_ops {

using corner_pool_detail::takes_over;

template <typename T>
void corner_pool_forward_cpu(const T* input, const CornerPoolShape& s,
                             int64_t begin, int64_t end, T* output) {
  const int64_t L = s.length, inner = s.inner;
  for (int64_t o = begin; o < end; ++o) {
    const T* in = input + o * L * inner;
    T* out = output + o * L * inner;
    for (int64_t step = 0; step < L; ++step) {
      const int64_t k = s.reverse ? L - 1 - step : step;
      const T* x = in + k * inner;
      T* y = out + k * inner;
      if (step == 0) {
        for (int64_t i = 0; i < inner; ++i) y[i] = x[i];
        continue;
      }
      const T* prev = out + (s.reverse ? k + 1 : k - 1) * inner;
      for (int64_t i = 0; i < inner; ++i) {
        y[i] = takes_over(x[i], prev[i]) ? x[i] : prev[i];
      }
    }
  }
}

template <typename T>
void corner_pool_backward_cpu(const T* grad_output, const T* input,
                              const CornerPoolShape& s, int64_t begin,
                              int64_t end, T* grad_input) {
  const int64_t L = s.length, inner = s.inner;
  if (L == 0) return;
  std::vector<T> best(inner), acc(inner);
  std::vector<int64_t> arg(inner);
  for (int64_t o = begin; o < end; ++o) {
    const T* in = input + o * L * inner;
    const T* gout = grad_output + o * L * inner;
    T* gin = grad_input + o * L * inner;
    for (int64_t step = 0; step < L; ++step) {
      const int64_t k = s.reverse ? L - 1 - step : step;
      const T* x = in + k * inner;
      const T* g = gout + k * inner;
      for (int64_t i = 0; i < inner; ++i) {
        if (step == 0 || takes_over(x[i], best[i])) {
          // Each position becomes the maximum at most once along a scan, so
          // its gradient is complete when the maximum moves on.
          if (step != 0) gin[arg[i] * inner + i] = acc[i];
          best[i] = x[i];
          arg[i] = k;
          acc[i] = T(0);
        }
        acc[i] += g[i];
      }
    }
    for (int64_t i = 0; i < inner; ++i) gin[arg[i] * inner + i] = acc[i];
  }
}

#define VISDET_INSTANTIATE(T)                                              \
  template void corner_pool_forward_cpu<T>(const T*, const CornerPoolShape&, \
                                           int64_t, int64_t, T*);          \
  template void corner_pool_backward_cpu<T>(                               \
      const T*, const T*, const CornerPoolShape&, int64_t, int64_t, T*);
VISDET_INSTANTIATE(float)
VISDET_INSTANTIATE(double)
#undef VISDET_INSTANTIATE

}  // namespace visdet_ops
