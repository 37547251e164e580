// Multi-scale deformable attention: CUDA kernels (torch-free).
//
// Thread layout (forward and backward): one thread per (batch, query, head,
// group of VEC consecutive channels). value is [B, K, M, D] with the channels
// innermost, so the D / VEC threads of one (query, head) read each bilinear
// corner as one contiguous run of D channels, VEC per thread in a single
// vector load (16 bytes where D and the pointers allow it); the sample's
// location, weight and corner arithmetic are computed once per VEC channels
// rather than once per channel as in mmcv.
//
// Backward: grad_value takes one atomicAdd per corner and channel (different
// queries sample the same pixels); on sm_90+ one vector atomic (float2 /
// float4) per corner and 2 / 4 channels. The location and weight gradients of a
// sample sum over the D channels: when the D / VEC threads of a (query, head)
// are a power of two <= 32 (they then sit in one warp), a butterfly of warp
// shuffles reduces them and one lane writes each gradient with a plain store
// (no atomics, no shared memory, no block-wide syncs); otherwise every thread
// atomically adds its partial sums. 16-bit inputs accumulate in float32
// buffers that the host converts once.
#include <type_traits>

#include "common/cuda_helpers.cuh"
#include "common/scalar.h"
#include "multi_scale_deform_attn_kernel.h"
#include "multi_scale_deform_attn_launch.h"

namespace visdet_ops {
namespace {

using msda_detail::Corners;
using msda_detail::sample_corners;

template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

template <typename T, int N>
__device__ __forceinline__ void load_acc(const T* p, acc_t<T>* out) {
  const Pack<T, N> pk = *reinterpret_cast<const Pack<T, N>*>(p);
#pragma unroll
  for (int i = 0; i < N; ++i) out[i] = to_acc(pk.v[i]);
}

// grad_value += v (VEC channels). On sm_90+, float accumulators use the
// vector atomics (atomicAdd on float2 / float4, one instruction per 2 / 4
// channels instead of one per channel; each element is still atomic on its
// own). dst is aligned to VEC elements (D % VEC == 0, fresh allocation).
template <typename A, int VEC>
__device__ __forceinline__ void atomic_add_vec(A* dst, const A* v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr bool kFloat = std::is_same_v<A, float>;
  constexpr bool kV4 = kFloat && VEC % 4 == 0;
  constexpr bool kV2 = kFloat && VEC == 2;
#else
  constexpr bool kV4 = false, kV2 = false;
#endif
  if constexpr (kV4) {
#pragma unroll
    for (int i = 0; i < VEC / 4; ++i) {
      atomicAdd(reinterpret_cast<float4*>(dst) + i,
                make_float4(v[4 * i], v[4 * i + 1], v[4 * i + 2],
                            v[4 * i + 3]));
    }
  } else if constexpr (kV2) {
    atomicAdd(reinterpret_cast<float2*>(dst), make_float2(v[0], v[1]));
  } else {
#pragma unroll
    for (int i = 0; i < VEC; ++i) atomicAdd(dst + i, v[i]);
  }
}

// Level l as (height, width, first key), or false when the level tables put
// it outside the num_keys keys of value. The host validates CPU tables; GPU
// tables only with VISDET_OPS_SYNC_CHECKS / VISDET_OPS_SYNC_LEVEL_CHECKS=1
// (reading them is a device-to-host wait). Otherwise this keeps every access
// in bounds: the forward gives NaN for such rows, the backward no gradient
// from that level. Uniform across the grid, so warps stay converged.
template <typename I>
__device__ __forceinline__ bool level_in_bounds(
    const int64_t* __restrict__ spatial_shapes,
    const int64_t* __restrict__ level_start, I l, int64_t num_keys,
    I* height, I* width, I* start) {
  const int64_t h = spatial_shapes[2 * l];
  const int64_t w = spatial_shapes[2 * l + 1];
  const int64_t st = level_start[l];
  if (h < 0 || w < 0 || st < 0 || st > num_keys) return false;
  // An empty level (h or w 0, e.g. 0 x 1) has no keys, whatever the other
  // side: it fits anywhere up to num_keys, and samples nothing.
  const bool empty = h == 0 || w == 0;
  if (!empty && (h > num_keys || w > num_keys)) return false;
  // h, w <= num_keys: with int32 indexing (num_keys < 2^31) h * w fits int64.
  const bool fits = empty || (sizeof(I) == 4 ? h * w <= num_keys - st
                                             : h <= (num_keys - st) / w);
  *height = static_cast<I>(empty ? 0 : h);  // an empty level as 0 x 0
  *width = static_cast<I>(empty ? 0 : w);
  *start = static_cast<I>(st);
  return fits;
}

template <typename T, typename I, int VEC>
__global__ void __launch_bounds__(cuda::kThreadsPerBlock)
    msda_forward_kernel(const T* __restrict__ value,
                        const int64_t* __restrict__ spatial_shapes,
                        const int64_t* __restrict__ level_start,
                        const acc_t<T>* __restrict__ loc,
                        const acc_t<T>* __restrict__ attn,
                        MSDAShape s, T* __restrict__ out) {
  using A = acc_t<T>;
  const I D = static_cast<I>(s.head_dim);
  const I M = static_cast<I>(s.num_heads);
  const I Q = static_cast<I>(s.num_queries);
  const I K = static_cast<I>(s.num_keys);
  const I L = static_cast<I>(s.num_levels);
  const I P = static_cast<I>(s.num_points);
  const I groups = D / VEC;
  const I key_stride = M * D;
  const I n = static_cast<I>(s.rows()) * groups;
  cuda::grid_stride_loop<I>(n, [&](I index) {
    const I g = index % groups;
    const I row = index / groups;
    const I m = row % M;
    const I b = row / M / Q;
    const acc_t<T>* row_loc = loc + row * L * P * 2;
    const acc_t<T>* row_attn = attn + row * L * P;
    const T* head_value = value + b * K * key_stride + m * D + g * VEC;
    A acc[VEC];
#pragma unroll
    for (int i = 0; i < VEC; ++i) acc[i] = A(0);
    for (I l = 0; l < L; ++l) {
      I height, width, start;
      if (!level_in_bounds<I>(spatial_shapes, level_start, l, s.num_keys,
                              &height, &width, &start)) {
        // Tables outside value's keys (GPU tables are not read on the host
        // by default): NaN output, as a bad RoI gives, never a read out of
        // bounds. Uniform across the grid.
#pragma unroll
        for (int i = 0; i < VEC; ++i) acc[i] = quiet_nan<A>();
        break;
      }
      const T* level_value = head_value + start * key_stride;
      // Not unrolled: unrolling by 4 (more loads in flight) measured no
      // faster on an H100 (Deformable DETR encoder and decoders).
#pragma unroll 1
      for (I p = 0; p < P; ++p) {
        const I si = l * P + p;
        Corners<A, I> c;
        if (!sample_corners<A, I>(to_acc(row_loc[2 * si]),
                                  to_acc(row_loc[2 * si + 1]), height, width,
                                  &c)) {
          continue;
        }
        const A w = to_acc(row_attn[si]);
        A v[4][VEC];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          if (c.valid[k]) {
            load_acc<T, VEC>(level_value + c.key[k] * key_stride, v[k]);
          } else {
#pragma unroll
            for (int i = 0; i < VEC; ++i) v[k][i] = A(0);
          }
        }
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
          acc[i] += msda_detail::bilinear(c, v[0][i], v[1][i], v[2][i],
                                          v[3][i]) *
                    w;
        }
      }
    }
    Pack<T, VEC> o;
#pragma unroll
    for (int i = 0; i < VEC; ++i) o.v[i] = from_acc<T>(acc[i]);
    *reinterpret_cast<Pack<T, VEC>*>(out + row * D + g * VEC) = o;
  });
}

template <typename T, typename I, int VEC, bool kWarpReduce>
__global__ void __launch_bounds__(cuda::kThreadsPerBlock)
    msda_backward_kernel(const T* __restrict__ grad_out,
                         const T* __restrict__ value,
                         const int64_t* __restrict__ spatial_shapes,
                         const int64_t* __restrict__ level_start,
                         const acc_t<T>* __restrict__ loc,
                        const acc_t<T>* __restrict__ attn,
                         MSDAShape s, acc_t<T>* grad_value,
                         acc_t<T>* __restrict__ grad_loc,
                         acc_t<T>* __restrict__ grad_attn) {
  using A = acc_t<T>;
  const I D = static_cast<I>(s.head_dim);
  const I M = static_cast<I>(s.num_heads);
  const I Q = static_cast<I>(s.num_queries);
  const I K = static_cast<I>(s.num_keys);
  const I L = static_cast<I>(s.num_levels);
  const I P = static_cast<I>(s.num_points);
  const I groups = D / VEC;
  const I key_stride = M * D;
  const I n = static_cast<I>(s.rows()) * groups;
  const I stride = static_cast<I>(blockDim.x) * static_cast<I>(gridDim.x);
  // The trip count is the same for every lane of a warp (base is
  // block-uniform): lanes past n run along on zeros, so that every lane
  // reaches every shuffle.
  for (I base = static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x);
       base < n; base += stride) {
    const I index = base + static_cast<I>(threadIdx.x);
    const bool active = index < n;
    const I safe_index = active ? index : n - 1;
    const I g = safe_index % groups;
    const I row = safe_index / groups;
    const I m = row % M;
    const I b = row / M / Q;
    const acc_t<T>* row_loc = loc + row * L * P * 2;
    const acc_t<T>* row_attn = attn + row * L * P;
    const I head_offset = b * K * key_stride + m * D + g * VEC;
    A top[VEC];
    if (active) {
      load_acc<T, VEC>(grad_out + row * D + g * VEC, top);
    } else {
#pragma unroll
      for (int i = 0; i < VEC; ++i) top[i] = A(0);
    }
    for (I l = 0; l < L; ++l) {
      I height, width, start;
      if (!level_in_bounds<I>(spatial_shapes, level_start, l, s.num_keys,
                              &height, &width, &start)) {
        continue;
      }
      const I level_offset = head_offset + start * key_stride;
      for (I p = 0; p < P; ++p) {
        const I si = l * P + p;
        A g_attn = A(0), g_x = A(0), g_y = A(0);
        Corners<A, I> c;
        const bool sampled =
            active && sample_corners<A, I>(to_acc(row_loc[2 * si]),
                                           to_acc(row_loc[2 * si + 1]), height,
                                           width, &c);
        if (sampled) {
          const A w = to_acc(row_attn[si]);
          A v[4][VEC];
#pragma unroll
          for (int k = 0; k < 4; ++k) {
            if (c.valid[k]) {
              load_acc<T, VEC>(value + level_offset + c.key[k] * key_stride,
                               v[k]);
            } else {
#pragma unroll
              for (int i = 0; i < VEC; ++i) v[k][i] = A(0);
            }
          }
#pragma unroll
          for (int i = 0; i < VEC; ++i) {
            const A top_w = top[i] * w;
            g_attn += top[i] * msda_detail::bilinear(c, v[0][i], v[1][i],
                                                     v[2][i], v[3][i]);
            g_x += msda_detail::grad_w_weight(c, v[0][i], v[1][i], v[2][i],
                                              v[3][i]) *
                   top_w;
            g_y += msda_detail::grad_h_weight(c, v[0][i], v[1][i], v[2][i],
                                              v[3][i]) *
                   top_w;
          }
#pragma unroll
          for (int k = 0; k < 4; ++k) {
            if (!c.valid[k]) continue;
            A add[VEC];
#pragma unroll
            for (int i = 0; i < VEC; ++i) add[i] = c.weight[k] * (top[i] * w);
            atomic_add_vec<A, VEC>(
                grad_value + level_offset + c.key[k] * key_stride, add);
          }
          g_x *= static_cast<A>(width);
          g_y *= static_cast<A>(height);
        }
        const I out_index = row * L * P + si;
        if (kWarpReduce) {
          for (int offset = static_cast<int>(groups) / 2; offset > 0;
               offset >>= 1) {
            g_attn += __shfl_xor_sync(0xffffffffu, g_attn, offset);
            g_x += __shfl_xor_sync(0xffffffffu, g_x, offset);
            g_y += __shfl_xor_sync(0xffffffffu, g_y, offset);
          }
          if (active && g == 0) {
            grad_attn[out_index] = g_attn;
            grad_loc[2 * out_index] = g_x;
            grad_loc[2 * out_index + 1] = g_y;
          }
        } else if (sampled) {
          atomicAdd(grad_attn + out_index, g_attn);
          atomicAdd(grad_loc + 2 * out_index, g_x);
          atomicAdd(grad_loc + 2 * out_index + 1, g_y);
        }
      }
    }
  }
}

bool aligned_to(const void* p, int64_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(bytes) == 0;
}

// Widest VEC (channels per thread) with VEC * sizeof(T) <= 16 bytes, D a
// multiple of VEC and every channel-indexed pointer aligned to VEC elements.
template <typename T>
int vector_width(const MSDAShape& s, const void* a, const void* b) {
  for (int vec = static_cast<int>(16 / sizeof(T)); vec > 1; vec /= 2) {
    const int64_t bytes = vec * static_cast<int64_t>(sizeof(T));
    if (s.head_dim % vec == 0 && aligned_to(a, bytes) && aligned_to(b, bytes)) {
      return vec;
    }
  }
  return 1;
}

bool fits_int32(const MSDAShape& s) {
  const int64_t limit = cuda::kMaxInt32LoopSize;
  const int64_t value_numel = s.batch * s.num_keys * s.num_heads * s.head_dim;
  const int64_t samples = s.rows() * s.num_levels * s.num_points;
  return value_numel < limit && 2 * samples < limit &&
         s.rows() * s.head_dim < limit;
}

template <typename T, typename I, int VEC>
void launch_forward(const void* value, const int64_t* spatial_shapes,
                    const int64_t* level_start, const void* loc,
                    const void* attn, const MSDAShape& s, void* out,
                    cudaStream_t stream) {
  const int64_t n = s.rows() * (s.head_dim / VEC);
  msda_forward_kernel<T, I, VEC>
      <<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, stream>>>(
          static_cast<const T*>(value), spatial_shapes, level_start,
          static_cast<const acc_t<T>*>(loc), static_cast<const acc_t<T>*>(attn), s,
          static_cast<T*>(out));}

template <typename T, typename I, int VEC>
void launch_backward(const void* grad_out, const void* value,
                     const int64_t* spatial_shapes, const int64_t* level_start,
                     const void* loc, const void* attn, const MSDAShape& s,
                     void* grad_value, void* grad_loc, void* grad_attn,
                     cudaStream_t stream) {
  using A = acc_t<T>;
  const int64_t groups = s.head_dim / VEC;
  const int64_t n = s.rows() * groups;
  const bool warp_reduce = groups <= 32 && (groups & (groups - 1)) == 0;
  auto args = [&](auto kernel) {
    kernel<<<cuda::blocks_for(n), cuda::kThreadsPerBlock, 0, stream>>>(
        static_cast<const T*>(grad_out), static_cast<const T*>(value),
        spatial_shapes, level_start, static_cast<const acc_t<T>*>(loc),
        static_cast<const acc_t<T>*>(attn), s, static_cast<A*>(grad_value),
        static_cast<A*>(grad_loc), static_cast<A*>(grad_attn));
  };
  if (warp_reduce) {
    args(msda_backward_kernel<T, I, VEC, true>);
  } else {
    args(msda_backward_kernel<T, I, VEC, false>);
  }
}

template <typename T, typename I>
void forward_vec(const void* value, const int64_t* spatial_shapes,
                 const int64_t* level_start, const void* loc, const void* attn,
                 const MSDAShape& s, void* out, cudaStream_t stream) {
  switch (vector_width<T>(s, value, out)) {
    case 8:
      if constexpr (sizeof(T) == 2) {
        launch_forward<T, I, 8>(value, spatial_shapes, level_start, loc, attn,
                                s, out, stream);
        return;
      }
      break;
    case 4:
      if constexpr (sizeof(T) <= 4) {
        launch_forward<T, I, 4>(value, spatial_shapes, level_start, loc, attn,
                                s, out, stream);
        return;
      }
      break;
    case 2:
      launch_forward<T, I, 2>(value, spatial_shapes, level_start, loc, attn, s,
                              out, stream);
      return;
    default:
      break;
  }
  launch_forward<T, I, 1>(value, spatial_shapes, level_start, loc, attn, s,
                          out, stream);
}

template <typename T, typename I>
void backward_vec(const void* grad_out, const void* value,
                  const int64_t* spatial_shapes, const int64_t* level_start,
                  const void* loc, const void* attn, const MSDAShape& s,
                  void* grad_value, void* grad_loc, void* grad_attn,
                  cudaStream_t stream) {
  switch (vector_width<T>(s, value, grad_out)) {
    case 8:
      if constexpr (sizeof(T) == 2) {
        launch_backward<T, I, 8>(grad_out, value, spatial_shapes, level_start,
                                 loc, attn, s, grad_value, grad_loc, grad_attn,
                                 stream);
        return;
      }
      break;
    case 4:
      if constexpr (sizeof(T) <= 4) {
        launch_backward<T, I, 4>(grad_out, value, spatial_shapes, level_start,
                                 loc, attn, s, grad_value, grad_loc, grad_attn,
                                 stream);
        return;
      }
      break;
    case 2:
      launch_backward<T, I, 2>(grad_out, value, spatial_shapes, level_start,
                               loc, attn, s, grad_value, grad_loc, grad_attn,
                               stream);
      return;
    default:
      break;
  }
  launch_backward<T, I, 1>(grad_out, value, spatial_shapes, level_start, loc,
                           attn, s, grad_value, grad_loc, grad_attn, stream);
}

template <typename T>
void forward_typed(const void* value, const int64_t* spatial_shapes,
                   const int64_t* level_start, const void* loc,
                   const void* attn, const MSDAShape& s, void* out,
                   cudaStream_t stream) {
  if (fits_int32(s)) {
    forward_vec<T, int32_t>(value, spatial_shapes, level_start, loc, attn, s,
                            out, stream);
  } else {
    forward_vec<T, int64_t>(value, spatial_shapes, level_start, loc, attn, s,
                            out, stream);
  }
}

template <typename T>
void backward_typed(const void* grad_out, const void* value,
                    const int64_t* spatial_shapes, const int64_t* level_start,
                    const void* loc, const void* attn, const MSDAShape& s,
                    void* grad_value, void* grad_loc, void* grad_attn,
                    cudaStream_t stream) {
  if (fits_int32(s)) {
    backward_vec<T, int32_t>(grad_out, value, spatial_shapes, level_start, loc,
                             attn, s, grad_value, grad_loc, grad_attn, stream);
  } else {
    backward_vec<T, int64_t>(grad_out, value, spatial_shapes, level_start, loc,
                             attn, s, grad_value, grad_loc, grad_attn, stream);
  }
}

}  // namespace

cudaError_t msda_forward_cuda_launch(MSDADtype dtype, const void* value,
                                     const int64_t* spatial_shapes,
                                     const int64_t* level_start,
                                     const void* loc, const void* attn,
                                     const MSDAShape& s, void* out,
                                     cudaStream_t stream) {
  if (s.rows() * s.head_dim == 0) return cudaSuccess;
  switch (dtype) {
    case MSDADtype::kFloat:
      forward_typed<float>(value, spatial_shapes, level_start, loc, attn, s,
                           out, stream);
      break;
    case MSDADtype::kDouble:
      forward_typed<double>(value, spatial_shapes, level_start, loc, attn, s,
                            out, stream);
      break;
    case MSDADtype::kHalf:
      forward_typed<__half>(value, spatial_shapes, level_start, loc, attn, s,
                            out, stream);
      break;
    case MSDADtype::kBFloat16:
      forward_typed<__nv_bfloat16>(value, spatial_shapes, level_start, loc,
                                   attn, s, out, stream);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t msda_backward_cuda_launch(MSDADtype dtype, const void* grad_out,
                                      const void* value,
                                      const int64_t* spatial_shapes,
                                      const int64_t* level_start,
                                      const void* loc, const void* attn,
                                      const MSDAShape& s, void* grad_value,
                                      void* grad_loc, void* grad_attn,
                                      cudaStream_t stream) {
  if (s.rows() * s.head_dim == 0) return cudaSuccess;
  switch (dtype) {
    case MSDADtype::kFloat:
      backward_typed<float>(grad_out, value, spatial_shapes, level_start, loc,
                            attn, s, grad_value, grad_loc, grad_attn, stream);
      break;
    case MSDADtype::kDouble:
      backward_typed<double>(grad_out, value, spatial_shapes, level_start, loc,
                             attn, s, grad_value, grad_loc, grad_attn, stream);
      break;
    case MSDADtype::kHalf:
      backward_typed<__half>(grad_out, value, spatial_shapes, level_start, loc,
                             attn, s, grad_value, grad_loc, grad_attn, stream);
      break;
    case MSDADtype::kBFloat16:
      backward_typed<__nv_bfloat16>(grad_out, value, spatial_shapes,
                                    level_start, loc, attn, s, grad_value,
                                    grad_loc, grad_attn, stream);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace visdet_ops
