#include <algorithm>

#include "focal_loss_kernel.h"
#include "focal_loss_launch.h"

namespace visdet_ops {
namespace {

using namespace focal_loss_detail;

bool sigmoid_target_valid(int64_t t, int64_t classes) {
  return t >= 0 && t <= classes;
}

// Weight factor of a row: weight[t] for a class, 1 for background.
template <typename T>
T row_weight(const T* weight, int64_t t, int64_t classes) {
  return (weight != nullptr && t >= 0 && t < classes) ? weight[t] : T(1);
}

// Row statistics of the softmax: max m, d_t = x_t - m, e_t = exp(d_t) and
// s_other = sum_{j != t} exp(x_j - m). t must lie in [0, classes).
template <typename T>
SoftmaxTarget<T> softmax_row(const T* x, int64_t classes, int64_t t, T* m_out) {
  T m = -static_cast<T>(INFINITY);
  for (int64_t c = 0; c < classes; ++c) m = nan_max(m, x[c]);
  T s_other = T(0);
  for (int64_t c = 0; c < classes; ++c) {
    if (c != t) s_other += exp_of(x[c] - m);
  }
  const T d_t = x[t] - m;
  *m_out = m;
  return softmax_target(d_t, exp_of(d_t), s_other);
}

// d loss / d x_c = k * ([c == t] - p_c) of one row (k: the row's coef times
// its grad_output, scale and weight).
template <typename T>
void softmax_row_grad(const T* x, int64_t classes, int64_t t, T m,
                      const SoftmaxTarget<T>& st, T k, T* g) {
  const T minus_k_over_s = -k / st.s;
  for (int64_t c = 0; c < classes; ++c) {
    g[c] = c == t ? k * st.u : minus_k_over_s * exp_of(x[c] - m);
  }
}

}  // namespace

template <typename T>
void sigmoid_focal_loss_forward_cpu(const T* input, const int64_t* target,
                                    const T* weight, int64_t classes, T gamma,
                                    T alpha, int64_t begin, int64_t end,
                                    T* loss, T* row_sum, T grad_scale,
                                    T* grad) {
  for (int64_t n = begin; n < end; ++n) {
    const int64_t t = target[n];
    const T* x = input + n * classes;
    const bool valid = sigmoid_target_valid(t, classes);
    const T w = row_weight(weight, t, classes);
    const T grad_w = grad_scale * w;
    T sum = T(0);
    for (int64_t c = 0; c < classes; ++c) {
      T value = quiet_nan<T>();
      T g = quiet_nan<T>();
      if (valid) {
        const ValueGrad<T> vg =
            sigmoid_focal_loss_value_grad(x[c], c == t, gamma, alpha);
        value = w * vg.value;
        if (grad != nullptr) g = grad_w * vg.grad;
      }
      if (grad != nullptr) grad[n * classes + c] = g;
      if (loss != nullptr) {
        loss[n * classes + c] = value;
      } else {
        sum += value;
      }
    }
    if (loss == nullptr) row_sum[n] = sum;
  }
}

template <typename T>
void softmax_focal_loss_forward_cpu(const T* input, const int64_t* target,
                                    const T* weight, int64_t classes, T gamma,
                                    T alpha, int64_t begin, int64_t end,
                                    T* loss, T grad_scale, T* grad) {
  for (int64_t n = begin; n < end; ++n) {
    const int64_t t = target[n];
    T* g = grad == nullptr ? nullptr : grad + n * classes;
    if (t < 0 || t >= classes) {
      // Ignored rows (t < 0) have no loss; invalid ones get NaN.
      const T fill = t < 0 ? T(0) : quiet_nan<T>();
      loss[n] = fill;
      if (g != nullptr) std::fill(g, g + classes, fill);
      continue;
    }
    const T* x = input + n * classes;
    T m;
    const SoftmaxTarget<T> st = softmax_row(x, classes, t, &m);
    const T w = row_weight(weight, t, classes);
    loss[n] = w * softmax_focal_loss_value(st, gamma, alpha);
    if (g != nullptr) {
      softmax_row_grad(x, classes, t, m, st,
                       grad_scale * w * softmax_focal_loss_coef(st, gamma,
                                                                alpha),
                       g);
    }
  }
}

template <typename T>
void sigmoid_focal_loss_backward_cpu(const T* grad_output, int64_t go_stride_n,
                                     int64_t go_stride_c, T scale,
                                     const T* input, const int64_t* target,
                                     const T* weight, int64_t classes, T gamma,
                                     T alpha, int64_t begin, int64_t end,
                                     T* grad_input) {
  for (int64_t n = begin; n < end; ++n) {
    const int64_t t = target[n];
    const T* x = input + n * classes;
    T* g = grad_input + n * classes;
    if (!sigmoid_target_valid(t, classes)) {
      for (int64_t c = 0; c < classes; ++c) g[c] = quiet_nan<T>();
      continue;
    }
    const T w = scale * row_weight(weight, t, classes);
    for (int64_t c = 0; c < classes; ++c) {
      const T go = grad_output[n * go_stride_n + c * go_stride_c];
      g[c] = go * w * sigmoid_focal_loss_grad(x[c], c == t, gamma, alpha);
    }
  }
}

template <typename T>
void softmax_focal_loss_backward_cpu(const T* grad_output, int64_t go_stride_n,
                                     T scale, const T* input,
                                     const int64_t* target, const T* weight,
                                     int64_t classes, T gamma, T alpha,
                                     int64_t begin, int64_t end,
                                     T* grad_input) {
  for (int64_t n = begin; n < end; ++n) {
    const int64_t t = target[n];
    const T* x = input + n * classes;
    T* g = grad_input + n * classes;
    if (t < 0 || t >= classes) {
      const T fill = t < 0 ? T(0) : quiet_nan<T>();
      for (int64_t c = 0; c < classes; ++c) g[c] = fill;
      continue;
    }
    T m;
    const SoftmaxTarget<T> st = softmax_row(x, classes, t, &m);
    softmax_row_grad(x, classes, t, m, st,
                     grad_output[n * go_stride_n] * scale *
                         row_weight(weight, t, classes) *
                         softmax_focal_loss_coef(st, gamma, alpha),
                     g);
  }
}

#define VISDET_INSTANTIATE(T)                                                 \
  template void sigmoid_focal_loss_forward_cpu<T>(                            \
      const T*, const int64_t*, const T*, int64_t, T, T, int64_t, int64_t,    \
      T*, T*, T, T*);                                                         \
  template void softmax_focal_loss_forward_cpu<T>(                            \
      const T*, const int64_t*, const T*, int64_t, T, T, int64_t, int64_t,    \
      T*, T, T*);                                                             \
  template void sigmoid_focal_loss_backward_cpu<T>(                           \
      const T*, int64_t, int64_t, T, const T*, const int64_t*, const T*,      \
      int64_t, T, T, int64_t, int64_t, T*);                                   \
  template void softmax_focal_loss_backward_cpu<T>(                           \
      const T*, int64_t, T, const T*, const int64_t*, const T*, int64_t, T,   \
      T, int64_t, int64_t, T*);
VISDET_INSTANTIATE(float)
VISDET_INSTANTIATE(double)
#undef VISDET_INSTANTIATE

}  // namespace visdet_ops
