// Soft-NMS on CUDA: one thread block per segment (class). Each round, every
// thread decays the scores it owns by the previous pick and proposes its best
// survivor; a block-wide argmax picks the next box. Two barriers per pick. The
// working scores and the segment's boxes live in shared memory when they fit
// (so the per-round loads and the picked box's broadcast never leave the SM),
// else scores in global scratch and boxes read from global memory.
//
// One class of at most kMaxMaskBoxes boxes (plain soft_nms) first builds an
// n x n "touches" bitmask in parallel: bit (i, j) is set when picking i may
// change j's score (a superset: the IoU is near or above the threshold, or,
// for gaussian, any overlap). A round then stages the pick's mask row in
// shared memory and recomputes only the touched scores, with the same
// arithmetic as the plain path; every other score is provably multiplied by
// exactly 1, so the result is bit-identical and a round costs a bit test per
// box instead of an IoU.
#include <cstdint>

#include "common/cuda_helpers.cuh"
#include "common/scalar.h"
#include "soft_nms_kernel.h"
#include "soft_nms_launch.h"

namespace visdet_ops {
namespace {

constexpr int kMaxThreads = 1024;
constexpr int kWarp = 32;

template <typename T>
__device__ __forceinline__ void argmax_merge(T& best, int& best_pos, T score,
                                             int pos) {
  if (pos >= 0 && soft_nms_detail::better(score, pos, best, best_pos)) {
    best = score;
    best_pos = pos;
  }
}

// Butterfly: every lane ends with the warp's best ("better" is a total order,
// so the merge order does not matter).
template <typename T>
__device__ __forceinline__ void warp_argmax(T& best, int& best_pos) {
  for (int delta = kWarp / 2; delta > 0; delta /= 2) {
    const T other = __shfl_xor_sync(0xffffffffu, best, delta);
    const int other_pos = __shfl_xor_sync(0xffffffffu, best_pos, delta);
    argmax_merge(best, best_pos, other, other_pos);
  }
}

// One box (16-byte aligned rows) in one or two vector loads.
__device__ __forceinline__ void load_box(const float* p, float* b) {
  const float4 v = *reinterpret_cast<const float4*>(p);
  b[0] = v.x;
  b[1] = v.y;
  b[2] = v.z;
  b[3] = v.w;
}
__device__ __forceinline__ void load_box(const double* p, double* b) {
  const double2 lo = reinterpret_cast<const double2*>(p)[0];
  const double2 hi = reinterpret_cast<const double2*>(p)[1];
  b[0] = lo.x;
  b[1] = lo.y;
  b[2] = hi.x;
  b[3] = hi.y;
}

constexpr int kMaskBits = 64;
constexpr int64_t kMaxMaskBoxes = 32768;  // mask <= 128 MiB

// Whether picking a box overlapping another by `ovr` may change the other's
// score. Superset of weight(ovr) != 1: a margin of 1e-4 in IoU absorbs any
// difference in rounding between this kernel and the round kernel.
template <typename T>
__device__ __forceinline__ bool may_touch(T ovr, const SoftNmsParams<T>& p) {
  if (p.method == soft_nms_detail::kGaussian) return ovr > T(0);
  return ovr >= p.iou_threshold - T(1e-4);
}

template <typename T>
__global__ void soft_nms_mask_kernel(const T* __restrict__ boxes, int n,
                                     int words, SoftNmsParams<T> params,
                                     uint64_t* __restrict__ mask) {
  __shared__ T block_boxes[kMaskBits * 4];
  const int row_start = blockIdx.y * kMaskBits;
  const int col_start = blockIdx.x * kMaskBits;
  const int col_size = min_of(n - col_start, kMaskBits);
  if (static_cast<int>(threadIdx.x) < col_size) {
    for (int k = 0; k < 4; ++k) {
      block_boxes[threadIdx.x * 4 + k] = boxes[4 * (col_start + threadIdx.x) + k];
    }
  }
  __syncthreads();
  const int i = row_start + threadIdx.x;
  if (i >= n) return;
  T a[4];
  for (int k = 0; k < 4; ++k) a[k] = boxes[4 * i + k];
  uint64_t bits = 0;
  for (int jj = 0; jj < col_size; ++jj) {
    if (col_start + jj == i) continue;
    const T ovr = soft_nms_detail::iou(a, block_boxes + 4 * jj, params.offset);
    if (may_touch(ovr, params)) bits |= 1ULL << jj;
  }
  mask[static_cast<int64_t>(i) * words + blockIdx.x] = bits;
}

template <typename T>
__global__ void soft_nms_kernel(const T* __restrict__ boxes,
                                const T* __restrict__ scores,
                                const int64_t* __restrict__ offsets,
                                SoftNmsParams<T> params, T* global_scores,
                                const uint64_t* __restrict__ mask,
                                int mask_words,
                                int64_t* __restrict__ picked,
                                T* __restrict__ picked_scores,
                                int64_t* __restrict__ counts) {
  using namespace soft_nms_detail;
  extern __shared__ unsigned char shared_raw[];
  // Per-warp candidates, double-buffered by round parity: one barrier per
  // round (a slot is rewritten two rounds later, after the next barrier).
  __shared__ T warp_best[2][kMaxThreads / kWarp];
  __shared__ int warp_pos[2][kMaxThreads / kWarp];

  const int64_t segment = blockIdx.x;
  const int64_t start = offsets[segment];
  const int len = static_cast<int>(offsets[segment + 1] - start);
  const bool in_shared = global_scores == nullptr;
  // Shared layout: the pick's mask row (an even number of words, so the boxes
  // stay 16-byte aligned), boxes [len, 4], scores [len].
  uint64_t* row = reinterpret_cast<uint64_t*>(shared_raw);
  const int row_words = mask != nullptr ? (mask_words + 1) / 2 * 2 : 0;
  T* box = in_shared ? reinterpret_cast<T*>(row + row_words)
                     : const_cast<T*>(boxes + 4 * start);
  T* score = in_shared ? box + 4 * static_cast<int64_t>(len)
                       : global_scores + start;
  const T dead = quiet_nan<T>();  // NaN marks a box out of the running
  for (int j = threadIdx.x; j < len; j += blockDim.x) {
    const T s = scores[start + j];
    score[j] = alive(s) ? s : dead;
  }
  if (in_shared) {
    for (int k = threadIdx.x; k < 4 * len; k += blockDim.x) {
      box[k] = boxes[4 * start + k];
    }
    __syncthreads();  // every thread reads every box (the picked one)
  }
  // Scores: each j is only ever touched by thread j % blockDim.x.

  const int lane = threadIdx.x % kWarp;
  const int warp = threadIdx.x / kWarp;
  const int num_warps = (blockDim.x + kWarp - 1) / kWarp;
  int64_t count = 0;
  int pick = -1;
  int parity = 0;
  T pick_box[4] = {T(0), T(0), T(0), T(0)};
  while (true) {
    T best = T(0);
    int best_pos = -1;
    const bool first_decay = count == 1;
    for (int j = threadIdx.x; j < len; j += blockDim.x) {
      T s = score[j];
      if (!alive(s)) continue;
      if (j == pick) {
        score[j] = dead;
        continue;
      }
      if (pick >= 0 && mask != nullptr && !((row[j / kMaskBits] >> (j % kMaskBits)) & 1)) {
        // weight is exactly 1: the score stands. Only the first decay drops
        // input scores already below min_score (as mmcv's first pass does).
        if (first_decay && !(s >= params.min_score)) {
          score[j] = dead;
          continue;
        }
      } else if (pick >= 0) {
        T b[4];
        load_box(box + 4 * j, b);
        const T ovr = iou(pick_box, b, params.offset);
        s *= weight(ovr, params.method, params.iou_threshold, params.sigma);
        if (!(s >= params.min_score)) s = dead;
        score[j] = s;
        if (!alive(s)) continue;
      }
      argmax_merge(best, best_pos, s, j);
    }
    warp_argmax(best, best_pos);
    if (lane == 0) {
      warp_best[parity][warp] = best;
      warp_pos[parity][warp] = best_pos;
    }
    __syncthreads();
    // Every warp reduces the candidates itself: no second barrier.
    best = lane < num_warps ? warp_best[parity][lane] : T(0);
    best_pos = lane < num_warps ? warp_pos[parity][lane] : -1;
    warp_argmax(best, best_pos);
    parity ^= 1;
    pick = best_pos;
    if (pick < 0) break;
    if (threadIdx.x == 0) {
      picked[start + count] = start + pick;
      picked_scores[start + count] = best;
    }
    ++count;
    load_box(box + 4 * pick, pick_box);
    if (mask != nullptr) {
      // Safe to overwrite: every read of the previous row happened before the
      // barrier above.
      for (int w = threadIdx.x; w < mask_words; w += blockDim.x) {
        row[w] = mask[static_cast<int64_t>(pick) * mask_words + w];
      }
      __syncthreads();
    }
  }
  if (threadIdx.x == 0) counts[segment] = count;
}

int shared_limit(int device) {
  int limit = 0;
  if (cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                             device) != cudaSuccess) {
    (void)cudaGetLastError();
    return 48 * 1024;
  }
  return limit;
}

// Shared bytes per block for a segment's boxes and working scores.
template <typename T>
int64_t shared_bytes_for(int64_t max_len) {
  return max_len * 5 * static_cast<int64_t>(sizeof(T));
}

// Whether they fit next to the kernel's static shared arrays (~0.4 KiB;
// 4 KiB kept free).
template <typename T>
bool scores_fit_shared(int64_t max_len, int device) {
  return shared_bytes_for<T>(max_len) <=
         static_cast<int64_t>(shared_limit(device)) - 4096;
}

// The touches-mask path: one segment that fits the mask and shared memory.
template <typename T>
bool use_mask(int64_t num_segments, int64_t max_len, int device) {
  const int64_t words = (max_len + kMaskBits - 1) / kMaskBits;
  return num_segments == 1 && max_len <= kMaxMaskBoxes &&
         shared_bytes_for<T>(max_len) + (words + 1) / 2 * 2 * 8 <=
             static_cast<int64_t>(shared_limit(device)) - 4096;
}

}  // namespace

template <typename T>
int64_t soft_nms_cuda_workspace_bytes(int64_t n, int64_t num_segments,
                                      int64_t max_len, int device) {
  if (use_mask<T>(num_segments, max_len, device)) {
    return max_len * ((max_len + kMaskBits - 1) / kMaskBits) * 8;
  }
  return scores_fit_shared<T>(max_len, device)
             ? 0
             : n * static_cast<int64_t>(sizeof(T));
}

template <typename T>
cudaError_t soft_nms_cuda_launch(const T* boxes, const T* scores,
                                 const int64_t* offsets, int64_t num_segments,
                                 int64_t n, int64_t max_len,
                                 SoftNmsParams<T> params, int64_t* picked,
                                 T* picked_scores, int64_t* counts,
                                 void* workspace, int device,
                                 cudaStream_t stream) {
  if (num_segments <= 0 || num_segments > 0x7fffffffLL || max_len <= 0 ||
      max_len > 0x7fffffffLL) {
    return cudaErrorInvalidValue;  // the caller handles empty input
  }
  const bool masked = use_mask<T>(num_segments, max_len, device);
  const bool in_shared = masked || scores_fit_shared<T>(max_len, device);
  const int words = static_cast<int>((max_len + kMaskBits - 1) / kMaskBits);
  size_t shared_bytes =
      in_shared ? static_cast<size_t>(shared_bytes_for<T>(max_len)) : 0;
  uint64_t* mask = nullptr;
  if (masked) {
    shared_bytes += static_cast<size_t>((words + 1) / 2 * 2) * 8;
    mask = static_cast<uint64_t*>(workspace);
    const dim3 grid(static_cast<unsigned int>(words),
                    static_cast<unsigned int>(words));
    soft_nms_mask_kernel<T><<<grid, kMaskBits, 0, stream>>>(
        boxes, static_cast<int>(max_len), words, params, mask);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
  }
  if (shared_bytes > 48 * 1024) {
    const cudaError_t err = cudaFuncSetAttribute(
        soft_nms_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
        static_cast<int>(shared_bytes));
    if (err != cudaSuccess) return err;
  }
  const int threads = static_cast<int>(min_of<int64_t>(
      max_of<int64_t>((max_len + kWarp - 1) / kWarp * kWarp, kWarp),
      kMaxThreads));
  (void)n;
  soft_nms_kernel<T><<<static_cast<unsigned int>(num_segments), threads,
                       shared_bytes, stream>>>(
      boxes, scores, offsets, params,
      in_shared ? nullptr : static_cast<T*>(workspace), mask, words, picked,
      picked_scores, counts);
  return cudaGetLastError();
}

#define VISDET_INSTANTIATE_SOFT_NMS(T)                                        \
  template int64_t soft_nms_cuda_workspace_bytes<T>(int64_t, int64_t,         \
                                                    int64_t, int);            \
  template cudaError_t soft_nms_cuda_launch<T>(                               \
      const T*, const T*, const int64_t*, int64_t, int64_t, int64_t,          \
      SoftNmsParams<T>, int64_t*, T*, int64_t*, void*, int, cudaStream_t);
VISDET_INSTANTIATE_SOFT_NMS(float)
VISDET_INSTANTIATE_SOFT_NMS(double)
#undef VISDET_INSTANTIATE_SOFT_NMS

}  // namespace visdet_ops
