// CUDA focal losses. Sigmoid: elementwise, a grid-stride loop unrolled by 4.
// Softmax: a group of 4-32 lanes per row (row max and sum of exponentials by
// shuffles), the row held in registers for C <= 128 (read once, each
// exponential computed once). Nothing of size N x C is allocated but the output of reduction
// 'none' and grad_input. Reductions: one partial sum per block, then one block
// sums them, both in a fixed order: no atomics, bitwise reproducible.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "common/cuda_helpers.cuh"
#include "focal_loss_kernel.h"
#include "focal_loss_launch.h"

namespace visdet_ops {
namespace {

using namespace focal_loss_detail;

constexpr int kThreads = cuda::kThreadsPerBlock;
constexpr int kWarps = kThreads / 32;
// Grid of a reducing forward, one partial sum per block. A constant, so the
// summation order (and the bits of the result) are the same on every GPU.
constexpr unsigned int kReduceBlocks = 2048;
// Workspace: word 0 the bad-target flag, word 1 padding, then the partial
// sums (8-byte aligned).
constexpr int64_t kPartialsOffsetWords = 2;

// A softmax kernel shape: lanes per row, logits per lane in registers (0: any
// number, re-read from cache).
template <int kGroupV, int kPerLaneV>
struct Shape {
  static constexpr int kGroup = kGroupV;
  static constexpr int kPerLane = kPerLaneV;
};

template <typename T>
struct Acc {
  using type = float;
};
template <>
struct Acc<double> {
  using type = double;
};

__device__ __forceinline__ float to_acc(float v) { return v; }
__device__ __forceinline__ double to_acc(double v) { return v; }
__device__ __forceinline__ float to_acc(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_acc(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

template <typename T>
__device__ __forceinline__ T from_acc(typename Acc<T>::type v);
template <>
__device__ __forceinline__ float from_acc<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ double from_acc<double>(double v) {
  return v;
}
template <>
__device__ __forceinline__ __half from_acc<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_acc<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// Sum over a block of kThreads threads, in a fixed order; valid in thread 0.
template <typename A>
__device__ A block_sum(A v) {
  __shared__ A warp_sums[kWarps];
  for (int offset = 16; offset > 0; offset >>= 1) {
    v += __shfl_down_sync(0xffffffffu, v, offset);
  }
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  v = A(0);
  if (warp == 0) {
    v = lane < kWarps ? warp_sums[lane] : A(0);
    for (int offset = 16; offset > 0; offset >>= 1) {
      v += __shfl_down_sync(0xffffffffu, v, offset);
    }
  }
  return v;
}

template <int kGroup, typename A>
__device__ __forceinline__ A group_sum(A v) {
  for (int offset = kGroup / 2; offset > 0; offset >>= 1) {
    v += __shfl_xor_sync(0xffffffffu, v, offset, kGroup);
  }
  return v;
}

template <int kGroup, typename A>
__device__ __forceinline__ A group_max(A v) {
  for (int offset = kGroup / 2; offset > 0; offset >>= 1) {
    v = nan_max(v, __shfl_xor_sync(0xffffffffu, v, offset, kGroup));
  }
  return v;
}

// ---------------------------------------------------------------- sigmoid

// What the sigmoid kernels load for logit i = n * C + c: its value, its row's
// target, its class index and (backward) its grad_output.
template <typename A, typename I>
struct Logit {
  A x;
  A go;
  int64_t t;
  I c;
};

// Grid-stride loop unrolled by 4: elements i, i + S, i + 2S, i + 3S (S the
// grid's thread count) are loaded together, then computed, so their memory
// latencies overlap (one logit costs a dependent target load and an input
// load; one at a time the kernels wait on memory). The bounds are written so
// that nothing overflows I when n <= cuda::kMaxInt32LoopSize and the grid is
// at most cuda::blocks_for's cap.
template <typename I, typename Load, typename Body>
__device__ __forceinline__ void grid_stride_unrolled(I n, Load load,
                                                     Body body) {
  constexpr int kUnroll = 4;
  const I stride = static_cast<I>(blockDim.x) * static_cast<I>(gridDim.x);
  I i = static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) +
        static_cast<I>(threadIdx.x);
  using Item = decltype(load(i));
  for (; i < n - (kUnroll - 1) * stride; i += kUnroll * stride) {
    Item item[kUnroll];
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) item[k] = load(i + k * stride);
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) body(i + k * stride, item[k]);
  }
  for (; i < n; i += stride) body(i, load(i));
}

// Blocks of a sigmoid kernel without a reduction: about four logits a thread
// (one unrolled step of grid_stride_unrolled, or one vector of four).
inline unsigned int sigmoid_blocks(int64_t numel) {
  return cuda::blocks_for((numel + 3) / 4);
}

// Four consecutive values, loaded and stored as one access.
template <typename T>
struct alignas(4 * sizeof(T)) Vec4 {
  T v[4];
};

// The loss of logit x of class c in a row with target t, weighted, and (kGrad)
// its gradient times grad_scale; NaN for an invalid target (flagged).
template <bool kGrad, typename T, typename A>
__device__ __forceinline__ ValueGrad<A> sigmoid_element(
    A x, int64_t t, int64_t c, int64_t classes, const T* __restrict__ weight,
    A gamma, A alpha, A grad_scale, int32_t* __restrict__ bad_target) {
  ValueGrad<A> r;
  if (t >= 0 && t <= classes) {
    const A w = (weight != nullptr && t < classes) ? to_acc(weight[t]) : A(1);
    if constexpr (kGrad) {
      r = sigmoid_focal_loss_value_grad(x, c == t, gamma, alpha);
      r.grad *= grad_scale * w;
    } else {
      r.value = sigmoid_focal_loss_value(x, c == t, gamma, alpha);
    }
    r.value *= w;
  } else {
    // Every writer stores the same value; nullptr: no check asked for.
    if (bad_target != nullptr) *bad_target = 1;
    r.value = quiet_nan<A>();
    r.grad = quiet_nan<A>();
  }
  return r;
}

// kVec4: four consecutive logits of one row per step, as one load (and one
// store of each output): classes % 4 == 0 and aligned pointers, checked by
// the launcher. It saves the per-logit division by classes and target load.
// kGrad: also writes grad (the gradient of the reduced loss, a training
// forward).
template <typename T, typename I, bool kReduce, bool kGrad, bool kVec4>
__global__ void __launch_bounds__(kThreads) sigmoid_focal_loss_forward_kernel(
    const T* __restrict__ input, const int64_t* __restrict__ target,
    const T* __restrict__ weight, I numel, I classes,
    typename Acc<T>::type gamma, typename Acc<T>::type alpha,
    T* __restrict__ loss, typename Acc<T>::type* __restrict__ partials,
    int32_t* __restrict__ bad_target, typename Acc<T>::type grad_scale,
    T* __restrict__ grad) {
  using A = typename Acc<T>::type;
  A sum = A(0);
  auto element = [&](A x, int64_t t, I c) {
    return sigmoid_element<kGrad>(x, t, static_cast<int64_t>(c),
                                  static_cast<int64_t>(classes), weight, gamma,
                                  alpha, grad_scale, bad_target);
  };
  if constexpr (kVec4) {
    const I vectors = numel / 4;
    const I stride = static_cast<I>(blockDim.x) * static_cast<I>(gridDim.x);
    // Vector v of the loop, in row n, whose target is t.
    auto step = [&](I v, const Vec4<T>& x, I n, int64_t t) {
      const I c = v * 4 - n * classes;
      Vec4<T> out, g;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const ValueGrad<A> r = element(to_acc(x.v[k]), t, c + k);
        if constexpr (kReduce) {
          sum += r.value;
        } else {
          out.v[k] = from_acc<T>(r.value);
        }
        if constexpr (kGrad) g.v[k] = from_acc<T>(r.grad);
      }
      if constexpr (!kReduce) reinterpret_cast<Vec4<T>*>(loss)[v] = out;
      if constexpr (kGrad) reinterpret_cast<Vec4<T>*>(grad)[v] = g;
    };
    const Vec4<T>* in = reinterpret_cast<const Vec4<T>*>(input);
    I v = static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) +
          static_cast<I>(threadIdx.x);
    // Two vectors in flight per thread, their loads issued before either is
    // computed (the reducing grid is capped at kReduceBlocks blocks; run 26,
    // H200, 400k x 80: 140 -> 133 us). `vectors - stride` does not overflow:
    // v < vectors here.
    for (; v < vectors - stride; v += 2 * stride) {
      const I n0 = (v * 4) / classes;
      const I n1 = ((v + stride) * 4) / classes;
      const Vec4<T> x0 = in[v];
      const Vec4<T> x1 = in[v + stride];
      const int64_t t0 = target[n0];
      const int64_t t1 = target[n1];
      step(v, x0, n0, t0);
      step(v + stride, x1, n1, t1);
    }
    if (v < vectors) {
      const I n = (v * 4) / classes;
      step(v, in[v], n, target[n]);
    }
  } else {
    grid_stride_unrolled<I>(
        numel,
        [&](I i) {
          const I n = i / classes;
          return Logit<A, I>{to_acc(input[i]), A(0), target[n],
                             i - n * classes};
        },
        [&](I i, const Logit<A, I>& l) {
          const ValueGrad<A> r = element(l.x, l.t, l.c);
          if constexpr (kReduce) {
            sum += r.value;
          } else {
            loss[i] = from_acc<T>(r.value);
          }
          if constexpr (kGrad) grad[i] = from_acc<T>(r.grad);
        });
  }
  if constexpr (kReduce) {
    sum = block_sum(sum);
    if (threadIdx.x == 0) partials[blockIdx.x] = sum;
  }
}

// grad[i] *= *grad_output, where that is not 1; grid-stride, by four when
// kVec4 (numel % 4 == 0, aligned).
template <typename T, bool kVec4>
__global__ void __launch_bounds__(kThreads) focal_loss_scale_grad_kernel(
    T* __restrict__ grad, int64_t numel, const T* __restrict__ grad_output) {
  using A = typename Acc<T>::type;
  const A k = to_acc(*grad_output);
  if (k == A(1)) return;
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  const int64_t first =
      static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if constexpr (kVec4) {
    Vec4<T>* g = reinterpret_cast<Vec4<T>*>(grad);
    for (int64_t v = first; v < numel / 4; v += stride) {
      Vec4<T> x = g[v];
#pragma unroll
      for (int j = 0; j < 4; ++j) x.v[j] = from_acc<T>(to_acc(x.v[j]) * k);
      g[v] = x;
    }
  } else {
    for (int64_t i = first; i < numel; i += stride) {
      grad[i] = from_acc<T>(to_acc(grad[i]) * k);
    }
  }
}

template <typename T, typename I>
__global__ void __launch_bounds__(kThreads) sigmoid_focal_loss_backward_kernel(
    const T* __restrict__ grad_output, int64_t go_stride_n,
    int64_t go_stride_c, typename Acc<T>::type scale,
    const T* __restrict__ input, const int64_t* __restrict__ target,
    const T* __restrict__ weight, I numel, I classes,
    typename Acc<T>::type gamma, typename Acc<T>::type alpha,
    T* __restrict__ grad_input) {
  using A = typename Acc<T>::type;
  grid_stride_unrolled<I>(
      numel,
      [&](I i) {
        const I n = i / classes;
        const I c = i - n * classes;
        const A go = to_acc(grad_output[static_cast<int64_t>(n) * go_stride_n +
                                        static_cast<int64_t>(c) * go_stride_c]);
        return Logit<A, I>{to_acc(input[i]), go, target[n], c};
      },
      [&](I i, const Logit<A, I>& l) {
        const int64_t t = l.t;
        A grad;
        if (t >= 0 && t <= static_cast<int64_t>(classes)) {
          A w = scale;
          if (weight != nullptr && t < static_cast<int64_t>(classes)) {
            w *= to_acc(weight[t]);
          }
          grad = l.go * w *
                 sigmoid_focal_loss_grad(l.x, static_cast<int64_t>(l.c) == t,
                                         gamma, alpha);
        } else {
          grad = quiet_nan<A>();
        }
        grad_input[i] = from_acc<T>(grad);
      });
}

// ---------------------------------------------------------------- softmax

// A softmax row as seen by one lane of its group: the row max m, the target's
// statistics and, when kPerLane > 0, exp(x_c - m) of the lane's classes
// c = lane + j * kGroup (j < kPerLane), kept in registers so that the row is
// read from memory once and each exponential computed once. kPerLane == 0:
// any C, the row is re-read (from cache) instead.
template <typename A, int kPerLane>
struct SoftmaxRow {
  A e[kPerLane > 0 ? kPerLane : 1];
  A m;
  SoftmaxTarget<A> st;
};

// Statistics of row x for target t, reduced over the kGroup lanes of the row
// (every lane gets them). Rows that need no statistics (inactive: past the
// end, ignored or invalid target) read nothing but still take part in the
// shuffles.
template <typename T, int kGroup, int kPerLane>
__device__ __forceinline__ void softmax_row_stats(
    const T* __restrict__ x, int64_t classes, int64_t t, int lane, bool active,
    SoftmaxRow<typename Acc<T>::type, kPerLane>& r) {
  using A = typename Acc<T>::type;
  A m = -static_cast<A>(INFINITY);
  A s_other = A(0), e_t = A(0), d_t = A(0);
  if constexpr (kPerLane > 0) {
    A v[kPerLane];
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int c = lane + j * kGroup;
      v[j] = (active && c < classes) ? to_acc(x[c]) : -static_cast<A>(INFINITY);
    }
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) m = nan_max(m, v[j]);
    m = group_max<kGroup>(m);
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int c = lane + j * kGroup;
      A e = A(0);
      if (active && c < classes) {
        const A d = v[j] - m;
        e = exp_of(d);
        if (c == t) {
          d_t = d;
          e_t = e;
        } else {
          s_other += e;
        }
      }
      r.e[j] = e;
    }
  } else {
    if (active) {
      for (int64_t c = lane; c < classes; c += kGroup) {
        m = nan_max(m, to_acc(x[c]));
      }
    }
    m = group_max<kGroup>(m);
    if (active) {
      for (int64_t c = lane; c < classes; c += kGroup) {
        const A d = to_acc(x[c]) - m;
        const A e = exp_of(d);
        if (c == t) {
          d_t = d;
          e_t = e;
        } else {
          s_other += e;
        }
      }
    }
  }
  // One lane holds d_t and e_t, the others 0: the sums are exact.
  s_other = group_sum<kGroup>(s_other);
  e_t = group_sum<kGroup>(e_t);
  d_t = group_sum<kGroup>(d_t);
  r.m = m;
  r.st = softmax_target(d_t, e_t, s_other);
}

// Writes row n's gradient g[c] = k * ([c == t] - p_c) from its statistics
// (k: the row's coef times its grad_output, scale and weight); rows without a
// class get 0 (ignored, t < 0) or NaN (invalid target).
template <typename T, int kGroup, int kPerLane>
__device__ __forceinline__ void softmax_store_grad(
    T* __restrict__ g, const T* __restrict__ x, int64_t classes, int64_t t,
    int lane, bool has_class,
    const SoftmaxRow<typename Acc<T>::type, kPerLane>& r,
    typename Acc<T>::type k) {
  using A = typename Acc<T>::type;
  if (!has_class) {
    const T fill = from_acc<T>(t < 0 ? A(0) : quiet_nan<A>());
    for (int64_t c = lane; c < classes; c += kGroup) g[c] = fill;
    return;
  }
  const A minus_k_over_s = -k / r.st.s;
  const A grad_t = k * r.st.u;
  if constexpr (kPerLane > 0) {
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int c = lane + j * kGroup;
      if (c < classes) {
        g[c] = from_acc<T>(c == t ? grad_t : minus_k_over_s * r.e[j]);
      }
    }
  } else {
    for (int64_t c = lane; c < classes; c += kGroup) {
      const A grad =
          c == t ? grad_t : minus_k_over_s * exp_of(to_acc(x[c]) - r.m);
      g[c] = from_acc<T>(grad);
    }
  }
}

// Rows are visited in block-uniform steps, so every warp runs the same number
// of iterations and its shuffles always see all 32 lanes. kGrad: also writes
// grad, the gradient of the reduced loss times grad_scale.
template <typename T, int kGroup, int kPerLane, bool kReduce, bool kGrad>
__global__ void __launch_bounds__(kThreads) softmax_focal_loss_forward_kernel(
    const T* __restrict__ input, const int64_t* __restrict__ target,
    const T* __restrict__ weight, int64_t rows, int64_t classes,
    typename Acc<T>::type gamma, typename Acc<T>::type alpha,
    T* __restrict__ loss, typename Acc<T>::type* __restrict__ partials,
    int32_t* __restrict__ bad_target, typename Acc<T>::type grad_scale,
    T* __restrict__ grad) {
  using A = typename Acc<T>::type;
  constexpr int kRowsPerBlock = kThreads / kGroup;
  const int lane = threadIdx.x % kGroup;
  const int64_t step = static_cast<int64_t>(gridDim.x) * kRowsPerBlock;
  A sum = A(0);
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock;
       base < rows; base += step) {
    const int64_t n = base + threadIdx.x / kGroup;
    const bool in_range = n < rows;
    const int64_t t = in_range ? target[n] : -1;
    const bool has_class = t >= 0 && t < classes;
    const T* x = input + (in_range ? n : 0) * classes;
    SoftmaxRow<A, kPerLane> r;
    softmax_row_stats<T, kGroup, kPerLane>(x, classes, t, lane,
                                           in_range && has_class, r);
    if (!in_range) continue;
    const A w = (weight != nullptr && has_class) ? to_acc(weight[t]) : A(1);
    if constexpr (kGrad) {
      softmax_store_grad<T, kGroup, kPerLane>(
          grad + n * classes, x, classes, t, lane, has_class, r,
          grad_scale * softmax_focal_loss_coef(r.st, gamma, alpha) * w);
    }
    if (lane != 0) continue;
    A value;
    if (has_class) {
      value = softmax_focal_loss_value(r.st, gamma, alpha) * w;
    } else if (t < 0) {
      value = A(0);
    } else {
      if (bad_target != nullptr) *bad_target = 1;
      value = quiet_nan<A>();
    }
    if constexpr (kReduce) {
      sum += value;
    } else {
      loss[n] = from_acc<T>(value);
    }
  }
  if constexpr (kReduce) {
    sum = block_sum(sum);
    if (threadIdx.x == 0) partials[blockIdx.x] = sum;
  }
}

template <typename T, int kGroup, int kPerLane>
__global__ void __launch_bounds__(kThreads) softmax_focal_loss_backward_kernel(
    const T* __restrict__ grad_output, int64_t go_stride_n,
    typename Acc<T>::type scale, const T* __restrict__ input,
    const int64_t* __restrict__ target, const T* __restrict__ weight,
    int64_t rows, int64_t classes, typename Acc<T>::type gamma,
    typename Acc<T>::type alpha, T* __restrict__ grad_input) {
  using A = typename Acc<T>::type;
  constexpr int kRowsPerBlock = kThreads / kGroup;
  const int lane = threadIdx.x % kGroup;
  const int64_t step = static_cast<int64_t>(gridDim.x) * kRowsPerBlock;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock;
       base < rows; base += step) {
    const int64_t n = base + threadIdx.x / kGroup;
    const bool in_range = n < rows;
    const int64_t t = in_range ? target[n] : -1;
    const bool has_class = t >= 0 && t < classes;
    const T* x = input + (in_range ? n : 0) * classes;
    SoftmaxRow<A, kPerLane> r;
    softmax_row_stats<T, kGroup, kPerLane>(x, classes, t, lane,
                                           in_range && has_class, r);
    if (!in_range) continue;
    A k = A(0);
    if (has_class) {
      k = to_acc(grad_output[n * go_stride_n]) * scale *
          softmax_focal_loss_coef(r.st, gamma, alpha);
      if (weight != nullptr) k *= to_acc(weight[t]);
    }
    softmax_store_grad<T, kGroup, kPerLane>(grad_input + n * classes, x,
                                            classes, t, lane, has_class, r, k);
  }
}

// ---------------------------------------------------------------- reduction

template <typename T>
__global__ void __launch_bounds__(kThreads) focal_loss_finalize_kernel(
    const typename Acc<T>::type* __restrict__ partials, int num_partials,
    typename Acc<T>::type divisor, T* __restrict__ out) {
  using A = typename Acc<T>::type;
  A v = A(0);
  for (int i = threadIdx.x; i < num_partials; i += kThreads) v += partials[i];
  v = block_sum(v);
  if (threadIdx.x == 0) *out = from_acc<T>(v / divisor);
}

template <typename T>
cudaError_t launch_finalize(const typename Acc<T>::type* partials,
                            unsigned int num_partials, int reduction,
                            int64_t rows, T* out, cudaStream_t stream) {
  using A = typename Acc<T>::type;
  const A divisor = reduction == kMean ? static_cast<A>(rows) : A(1);
  focal_loss_finalize_kernel<T><<<1, kThreads, 0, stream>>>(
      partials, static_cast<int>(num_partials), divisor, out);
  return cudaGetLastError();
}

// Lanes per softmax row and logits per lane held in registers:
//   C <= 32: the smallest power of two >= C (4 to 32) lanes, one logit each;
//   C <= 64: 32 lanes, two each; C <= 128: 16 lanes, eight each (C = 80: five
//   each, every lane busy); larger C: 32 lanes re-reading the row.
template <typename F>
cudaError_t dispatch_softmax_shape(int64_t classes, F&& launch) {
  if (classes <= 4) return launch(Shape<4, 1>{});
  if (classes <= 8) return launch(Shape<8, 1>{});
  if (classes <= 16) return launch(Shape<16, 1>{});
  if (classes <= 32) return launch(Shape<32, 1>{});
  if (classes <= 64) return launch(Shape<32, 2>{});
  if (classes <= 128) return launch(Shape<16, 8>{});
  return launch(Shape<32, 0>{});
}

// What a forward launch needs, in the kernels' compute type A.
template <typename T>
struct ForwardArgs {
  using A = typename Acc<T>::type;
  const T* input;
  const int64_t* target;
  const T* weight;
  int64_t rows, classes;
  A gamma, alpha, grad_scale;
  int reduction;
  T* loss;
  int32_t* flag;  // nullptr: no target check asked for
  A* partials;    // reductions
  T* grad;        // nullptr: no gradient (the host allows it for reductions)

  ForwardArgs(const T* input_, const int64_t* target_, const T* weight_,
              int64_t rows_, int64_t classes_, double gamma_, double alpha_,
              int reduction_, T* loss_, int32_t* workspace, bool check_targets,
              double grad_scale_, T* grad_)
      : input(input_),
        target(target_),
        weight(weight_),
        rows(rows_),
        classes(classes_),
        gamma(static_cast<A>(gamma_)),
        alpha(static_cast<A>(alpha_)),
        grad_scale(static_cast<A>(grad_scale_)),
        reduction(reduction_),
        loss(loss_),
        flag(check_targets ? workspace : nullptr),
        partials(workspace == nullptr
                     ? nullptr
                     : reinterpret_cast<A*>(workspace + kPartialsOffsetWords)),
        grad(grad_) {}
};

// Runs launch(kReduce, kGrad, blocks) as std::bool_constant tags: without a
// reduction on `blocks`, with one on at most kReduceBlocks blocks, then the
// block that sums their partials.
template <typename T, typename Launch>
cudaError_t launch_forward(const ForwardArgs<T>& f, unsigned int blocks,
                           cudaStream_t stream, Launch&& launch) {
  if (f.reduction == kNone) {
    launch(std::false_type{}, std::false_type{}, blocks);
    return cudaGetLastError();
  }
  if (blocks > kReduceBlocks) blocks = kReduceBlocks;
  if (f.grad != nullptr) {
    launch(std::true_type{}, std::true_type{}, blocks);
  } else {
    launch(std::true_type{}, std::false_type{}, blocks);
  }
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  return launch_finalize<T>(f.partials, blocks, f.reduction, f.rows, f.loss,
                            stream);
}

template <typename T>
bool aligned_for_vec4(const void* p) {
  return p == nullptr ||
         reinterpret_cast<uintptr_t>(p) % alignof(Vec4<T>) == 0;
}

template <typename T, int kGroup, int kPerLane>
cudaError_t softmax_forward_shape(const ForwardArgs<T>& f,
                                  cudaStream_t stream) {
  constexpr int kRowsPerBlock = kThreads / kGroup;
  return launch_forward(
      f, cuda::blocks_for(f.rows, kRowsPerBlock), stream,
      [&](auto reduce, auto grad, unsigned int blocks) {
        softmax_focal_loss_forward_kernel<T, kGroup, kPerLane,
                                          decltype(reduce)::value,
                                          decltype(grad)::value>
            <<<blocks, kThreads, 0, stream>>>(
                f.input, f.target, f.weight, f.rows, f.classes, f.gamma,
                f.alpha, f.loss, f.partials, f.flag, f.grad_scale, f.grad);
      });
}

template <typename T, typename I>
cudaError_t sigmoid_forward_index(const ForwardArgs<T>& f,
                                  cudaStream_t stream) {
  const int64_t numel = f.rows * f.classes;
  auto run = [&](auto vec4) {
    constexpr bool kVec4 = decltype(vec4)::value;
    const unsigned int blocks =
        kVec4 ? cuda::blocks_for(numel / 4) : sigmoid_blocks(numel);
    return launch_forward(
        f, blocks, stream, [&](auto reduce, auto grad, unsigned int b) {
          sigmoid_focal_loss_forward_kernel<T, I, decltype(reduce)::value,
                                            decltype(grad)::value, kVec4>
              <<<b, kThreads, 0, stream>>>(
                  f.input, f.target, f.weight, static_cast<I>(numel),
                  static_cast<I>(f.classes), f.gamma, f.alpha, f.loss,
                  f.partials, f.flag, f.grad_scale, f.grad);
        });
  };
  // Vectors of four: 32-bit indices only (the common case; larger inputs
  // take the scalar loop).
  if constexpr (std::is_same_v<I, int32_t>) {
    if (f.classes % 4 == 0 && aligned_for_vec4<T>(f.input) &&
        aligned_for_vec4<T>(f.grad) &&
        (f.reduction != kNone || aligned_for_vec4<T>(f.loss))) {
      return run(std::true_type{});
    }
  }
  return run(std::false_type{});
}

}  // namespace

int64_t focal_loss_cuda_workspace_words() {
  // The partial sums are at most doubles: two words each.
  return kPartialsOffsetWords + 2 * static_cast<int64_t>(kReduceBlocks);
}

template <typename T>
cudaError_t sigmoid_focal_loss_forward_cuda_launch(
    const T* input, const int64_t* target, const T* weight, int64_t rows,
    int64_t classes, double gamma, double alpha, int reduction, T* loss,
    int32_t* workspace, bool check_targets, double grad_scale, T* grad,
    cudaStream_t stream) {
  if (check_targets) {
    const cudaError_t err =
        cudaMemsetAsync(workspace, 0, sizeof(int32_t), stream);
    if (err != cudaSuccess) return err;
  }
  const ForwardArgs<T> f(input, target, weight, rows, classes, gamma, alpha,
                         reduction, loss, workspace, check_targets, grad_scale,
                         grad);
  if (rows * classes <= cuda::kMaxInt32LoopSize) {
    return sigmoid_forward_index<T, int32_t>(f, stream);
  }
  return sigmoid_forward_index<T, int64_t>(f, stream);
}

template <typename T>
cudaError_t softmax_focal_loss_forward_cuda_launch(
    const T* input, const int64_t* target, const T* weight, int64_t rows,
    int64_t classes, double gamma, double alpha, int reduction, T* loss,
    int32_t* workspace, bool check_targets, double grad_scale, T* grad,
    cudaStream_t stream) {
  if (check_targets) {
    const cudaError_t err =
        cudaMemsetAsync(workspace, 0, sizeof(int32_t), stream);
    if (err != cudaSuccess) return err;
  }
  const ForwardArgs<T> f(input, target, weight, rows, classes, gamma, alpha,
                         reduction, loss, workspace, check_targets, grad_scale,
                         grad);
  return dispatch_softmax_shape(classes, [&](auto shape) {
    using S = decltype(shape);
    return softmax_forward_shape<T, S::kGroup, S::kPerLane>(f, stream);
  });
}

template <typename T>
cudaError_t focal_loss_scale_grad_cuda_launch(T* grad, int64_t numel,
                                              const T* grad_output,
                                              cudaStream_t stream) {
  // Enough blocks to stream the buffer; few, so that the early return (a
  // grad_output of 1) costs about a launch.
  constexpr unsigned int kMaxBlocks = 1024;
  if (numel % 4 == 0 && aligned_for_vec4<T>(grad)) {
    focal_loss_scale_grad_kernel<T, true>
        <<<std::min(cuda::blocks_for(numel / 4), kMaxBlocks), kThreads, 0,
           stream>>>(grad, numel, grad_output);
  } else {
    focal_loss_scale_grad_kernel<T, false>
        <<<std::min(cuda::blocks_for(numel), kMaxBlocks), kThreads, 0,
           stream>>>(grad, numel, grad_output);
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t sigmoid_focal_loss_backward_cuda_launch(
    const T* grad_output, int64_t go_stride_n, int64_t go_stride_c,
    double scale, const T* input, const int64_t* target, const T* weight,
    int64_t rows, int64_t classes, double gamma, double alpha, T* grad_input,
    cudaStream_t stream) {
  using A = typename Acc<T>::type;
  const int64_t numel = rows * classes;
  const unsigned int blocks = sigmoid_blocks(numel);
  if (numel <= cuda::kMaxInt32LoopSize) {
    sigmoid_focal_loss_backward_kernel<T, int32_t>
        <<<blocks, kThreads, 0, stream>>>(
            grad_output, go_stride_n, go_stride_c, static_cast<A>(scale),
            input, target, weight, static_cast<int32_t>(numel),
            static_cast<int32_t>(classes), static_cast<A>(gamma),
            static_cast<A>(alpha), grad_input);
  } else {
    sigmoid_focal_loss_backward_kernel<T, int64_t>
        <<<blocks, kThreads, 0, stream>>>(
            grad_output, go_stride_n, go_stride_c, static_cast<A>(scale),
            input, target, weight, numel, classes, static_cast<A>(gamma),
            static_cast<A>(alpha), grad_input);
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t softmax_focal_loss_backward_cuda_launch(
    const T* grad_output, int64_t go_stride_n, double scale, const T* input,
    const int64_t* target, const T* weight, int64_t rows, int64_t classes,
    double gamma, double alpha, T* grad_input, cudaStream_t stream) {
  using A = typename Acc<T>::type;
  return dispatch_softmax_shape(classes, [&](auto shape) {
    using S = decltype(shape);
    constexpr int kRowsPerBlock = kThreads / S::kGroup;
    softmax_focal_loss_backward_kernel<T, S::kGroup, S::kPerLane>
        <<<cuda::blocks_for(rows, kRowsPerBlock), kThreads, 0, stream>>>(
            grad_output, go_stride_n, static_cast<A>(scale), input, target,
            weight, rows, classes, static_cast<A>(gamma),
            static_cast<A>(alpha), grad_input);
    return cudaGetLastError();
  });
}

#define VISDET_INSTANTIATE(T)                                                  \
  template cudaError_t sigmoid_focal_loss_forward_cuda_launch<T>(              \
      const T*, const int64_t*, const T*, int64_t, int64_t, double, double,    \
      int, T*, int32_t*, bool, double, T*, cudaStream_t);                      \
  template cudaError_t softmax_focal_loss_forward_cuda_launch<T>(              \
      const T*, const int64_t*, const T*, int64_t, int64_t, double, double,    \
      int, T*, int32_t*, bool, double, T*, cudaStream_t);                      \
  template cudaError_t focal_loss_scale_grad_cuda_launch<T>(T*, int64_t,       \
                                                            const T*,          \
                                                            cudaStream_t);     \
  template cudaError_t sigmoid_focal_loss_backward_cuda_launch<T>(             \
      const T*, int64_t, int64_t, double, const T*, const int64_t*, const T*,  \
      int64_t, int64_t, double, double, T*, cudaStream_t);                     \
  template cudaError_t softmax_focal_loss_backward_cuda_launch<T>(             \
      const T*, int64_t, double, const T*, const int64_t*, const T*, int64_t,  \
      int64_t, double, double, T*, cudaStream_t);
VISDET_FOR_FLOATING_TYPES(VISDET_INSTANTIATE)
#undef VISDET_INSTANTIATE

}  // namespace visdet_ops
