// Focal loss math (mmcv.ops semantics) shared by the CPU loops and the CUDA
// kernels. Torch-free; A is the compute type (float or double).
//
// Sigmoid: each of the C logits of a row is its own binary problem; the class
// equal to the row's target is the positive one, every other class is a
// negative (target == C, "background", makes them all negative):
//   positive: -alpha       * (1 - p)^gamma * log(p)
//   negative: -(1 - alpha) * p^gamma       * log(1 - p),      p = sigmoid(x)
// Softmax: one loss per row, p_t = softmax(x)[target]:
//   -alpha * (1 - p_t)^gamma * log(p_t)
//
// mmcv computes p, then 1 - p and log(max(p, FLT_MIN)); in float, 1 - p is 0
// from x > ~17 and the loss saturates at (1 - alpha) * 87.3 (the true value is
// ~(1 - alpha) * x). Here every log comes from a stable log-sigmoid /
// log-sum-exp and every 1 - p from its own sum, so values and gradients stay
// exact for any finite logit; they equal mmcv's wherever mmcv does not
// underflow.
#pragma once

#include <math.h>

#include <cstdint>

#include "common/macros.h"

namespace visdet_ops {
namespace focal_loss_detail {

enum Reduction : int { kNone = 0, kMean = 1, kSum = 2 };

// float and double overloads of the libm functions, callable on both sides.
VISDET_HOST_DEVICE VISDET_INLINE float exp_of(float x) { return expf(x); }
VISDET_HOST_DEVICE VISDET_INLINE double exp_of(double x) { return exp(x); }
VISDET_HOST_DEVICE VISDET_INLINE float log_of(float x) { return logf(x); }
VISDET_HOST_DEVICE VISDET_INLINE double log_of(double x) { return log(x); }
VISDET_HOST_DEVICE VISDET_INLINE float log1p_of(float x) { return log1pf(x); }
VISDET_HOST_DEVICE VISDET_INLINE double log1p_of(double x) { return log1p(x); }
VISDET_HOST_DEVICE VISDET_INLINE float pow_of(float x, float y) {
  return powf(x, y);
}
VISDET_HOST_DEVICE VISDET_INLINE double pow_of(double x, double y) {
  return pow(x, y);
}

template <typename A>
VISDET_HOST_DEVICE VISDET_INLINE A quiet_nan();
template <>
VISDET_HOST_DEVICE VISDET_INLINE float quiet_nan<float>() {
  return nanf("");
}
template <>
VISDET_HOST_DEVICE VISDET_INLINE double quiet_nan<double>() {
  return nan("");
}

// v^gamma from log(v): exact where v itself would underflow, and 1 for
// gamma == 0 even at v == 0 (log v == -inf).
template <typename A>
VISDET_HOST_DEVICE VISDET_INLINE A pow_from_log(A log_v, A gamma) {
  return gamma == A(0) ? A(1) : exp_of(gamma * log_v);
}

// v * log(v) with its limit 0 at v == 0 (log v == -inf there); NaN stays NaN.
template <typename A>
VISDET_HOST_DEVICE VISDET_INLINE A xlogx(A v, A log_v) {
  return v == A(0) ? A(0) : v * log_v;
}

// p = sigmoid(x), q = 1 - p = sigmoid(-x) and their logs, each without
// cancellation: with e = exp(-|x|) in (0, 1], log(1 + e) is the common term.
template <typename A>
struct LogSigmoid {
  A p, q, log_p, log_q;
};

template <typename A>
VISDET_HOST_DEVICE VISDET_INLINE LogSigmoid<A> log_sigmoid(A x) {
  const A e = exp_of(x >= A(0) ? -x : x);
  const A l = log1p_of(e);
  const A r = A(1) / (A(1) + e);
  LogSigmoid<A> s;
  if (x >= A(0)) {
    s.p = r;
    s.q = e * r;
    s.log_p = -l;
    s.log_q = -x - l;
  } else {  // also NaN: every field becomes NaN
    s.p = e * r;
    s.q = r;
    s.log_p = x - l;
    s.log_q = -l;
  }
  return s;
}

// v^gamma of v in [0, 1] with log_v = log(v): v * v for gamma == 2 (the
// default: no exponential), else from the log.
template <typename A>
VISDET_HOST_DEVICE VISDET_INLINE A pow_of_prob(A v, A log_v, A gamma) {
  return gamma == A(2) ? v * v : pow_from_log(log_v, gamma);
}

// Loss of one logit x and its d loss / dx (positive: is its class the row's
// target), from one log_sigmoid. The gradient is mmcv's, with q = 1 - p:
//   positive: -alpha       * q^gamma * (q - gamma * p * log p)
//   negative: -(1 - alpha) * p^gamma * (gamma * q * log q - p)
template <typename A>
struct ValueGrad {
  A value, grad;
};

template <typename A>
VISDET_HOST_DEVICE VISDET_INLINE ValueGrad<A> sigmoid_focal_loss_value_grad(
    A x, bool positive, A gamma, A alpha) {
  const LogSigmoid<A> s = log_sigmoid(x);
  ValueGrad<A> r;
  if (positive) {
    const A w = -alpha * pow_of_prob(s.q, s.log_q, gamma);
    r.value = w * s.log_p;
    r.grad = w * (s.q - gamma * xlogx(s.p, s.log_p));
  } else {
    const A w = -(A(1) - alpha) * pow_of_prob(s.p, s.log_p, gamma);
    r.value = w * s.log_q;
    r.grad = w * (gamma * xlogx(s.q, s.log_q) - s.p);
  }
  return r;
}

// The loss alone (inlined, the gradient's arithmetic is dropped).
template <typename A>
VISDET_HOST_DEVICE VISDET_INLINE A sigmoid_focal_loss_value(A x, bool positive,
                                                            A gamma, A alpha) {
  return sigmoid_focal_loss_value_grad(x, positive, gamma, alpha).value;
}

template <typename A>
VISDET_HOST_DEVICE VISDET_INLINE A sigmoid_focal_loss_grad(A x, bool positive,
                                                           A gamma, A alpha) {
  return sigmoid_focal_loss_value_grad(x, positive, gamma, alpha).grad;
}

// The softmax probability of a row's target class and what the loss needs
// of it, from the row's max m and
//   d_t = x_t - m, e_t = exp(d_t), s_other = sum_{j != t} exp(x_j - m).
// u = 1 - p_t is s_other / s, never 1 - p_t (which is 0 in float as soon as
// p_t > 1 - 6e-8). log p_t = -log1p(s_other / e_t) where p_t >= 1/2, exact
// for p_t near 1, and d_t - log(s) elsewhere (two terms of one sign).
template <typename A>
struct SoftmaxTarget {
  A log_pt, pt, u, s;
};

template <typename A>
VISDET_HOST_DEVICE VISDET_INLINE SoftmaxTarget<A> softmax_target(A d_t, A e_t,
                                                                 A s_other) {
  SoftmaxTarget<A> r;
  r.s = e_t + s_other;
  r.pt = e_t / r.s;
  r.u = s_other / r.s;
  r.log_pt = e_t >= s_other ? -log1p_of(s_other / e_t) : d_t - log_of(r.s);
  return r;
}

// u^gamma: u * u for gamma == 2 (the default), else pow.
template <typename A>
VISDET_HOST_DEVICE VISDET_INLINE A pow_gamma(A u, A gamma) {
  return gamma == A(2) ? u * u : pow_of(u, gamma);
}

template <typename A>
VISDET_HOST_DEVICE VISDET_INLINE A softmax_focal_loss_value(
    const SoftmaxTarget<A>& t, A gamma, A alpha) {
  return -alpha * pow_gamma(t.u, gamma) * t.log_pt;
}

// coef such that d loss / d x_c = coef * ([c == t] - p_c):
//   coef = -alpha * (u^gamma - gamma * u^(gamma - 1) * p_t * log p_t)
//        = -alpha * u^gamma * (1 - gamma * p_t * log(p_t) / u),
// the second form finite for every gamma >= 0 as u -> 0, where
// p_t * log(p_t) / u -> -1 (mmcv's first form gives 0 * inf = NaN there for
// gamma < 1).
template <typename A>
VISDET_HOST_DEVICE VISDET_INLINE A softmax_focal_loss_coef(
    const SoftmaxTarget<A>& t, A gamma, A alpha) {
  const A ratio = t.u > A(0) ? t.pt * t.log_pt / t.u : A(-1);
  return -alpha * pow_gamma(t.u, gamma) * (A(1) - gamma * ratio);
}

// Row max that propagates NaN (fmax would drop it).
template <typename A>
VISDET_HOST_DEVICE VISDET_INLINE A nan_max(A a, A b) {
  return (b > a || b != b) ? b : a;
}

}  // namespace focal_loss_detail
}  // namespace visdet_ops
