#include "ms_deform_attn_kernel.h"
#include "ms_deform_attn_launch.h"

namespace visdet_ops {

using msda_detail::Corners;
using msda_detail::sample_corners;

template <typename T>
void msda_forward_cpu(const T* value, const int64_t* spatial_shapes,
                      const int64_t* level_start, const T* loc, const T* attn,
                      const MSDAShape& s, int64_t begin, int64_t end, T* out) {
  const int64_t D = s.head_dim, M = s.num_heads;
  const int64_t key_stride = M * D;  // one key of value
  const int64_t samples = s.num_levels * s.num_points;
  for (int64_t row = begin; row < end; ++row) {
    const int64_t m = row % M;
    const int64_t b = row / M / s.num_queries;
    T* o = out + row * D;
    for (int64_t d = 0; d < D; ++d) o[d] = T(0);
    const T* row_loc = loc + row * samples * 2;
    const T* row_attn = attn + row * samples;
    for (int64_t l = 0; l < s.num_levels; ++l) {
      const int64_t height = spatial_shapes[2 * l];
      const int64_t width = spatial_shapes[2 * l + 1];
      const T* level_value =
          value + (b * s.num_keys + level_start[l]) * key_stride + m * D;
      for (int64_t p = 0; p < s.num_points; ++p) {
        const int64_t si = l * s.num_points + p;
        Corners<T, int64_t> c;
        if (!sample_corners<T, int64_t>(row_loc[2 * si], row_loc[2 * si + 1],
                                        height, width, &c)) {
          continue;
        }
        const T w = row_attn[si];
        const T* corner[4];
        for (int k = 0; k < 4; ++k) {
          corner[k] = c.valid[k] ? level_value + c.key[k] * key_stride : nullptr;
        }
        for (int64_t d = 0; d < D; ++d) {
          const T v1 = corner[0] ? corner[0][d] : T(0);
          const T v2 = corner[1] ? corner[1][d] : T(0);
          const T v3 = corner[2] ? corner[2][d] : T(0);
          const T v4 = corner[3] ? corner[3][d] : T(0);
          o[d] += msda_detail::bilinear(c, v1, v2, v3, v4) * w;
        }
      }
    }
  }
}

template <typename T>
void msda_backward_cpu(const T* grad_out, const T* value,
                       const int64_t* spatial_shapes,
                       const int64_t* level_start, const T* loc, const T* attn,
                       const MSDAShape& s, int64_t begin, int64_t end,
                       T* grad_value, T* grad_loc, T* grad_attn) {
  const int64_t D = s.head_dim, M = s.num_heads;
  const int64_t key_stride = M * D;
  const int64_t samples = s.num_levels * s.num_points;
  for (int64_t pair = begin; pair < end; ++pair) {
    const int64_t b = pair / M;
    const int64_t m = pair % M;
    for (int64_t q = 0; q < s.num_queries; ++q) {
      const int64_t row = (b * s.num_queries + q) * M + m;
      const T* go = grad_out + row * D;
      const T* row_loc = loc + row * samples * 2;
      const T* row_attn = attn + row * samples;
      T* row_grad_loc = grad_loc + row * samples * 2;
      T* row_grad_attn = grad_attn + row * samples;
      for (int64_t l = 0; l < s.num_levels; ++l) {
        const int64_t height = spatial_shapes[2 * l];
        const int64_t width = spatial_shapes[2 * l + 1];
        const int64_t level_offset =
            (b * s.num_keys + level_start[l]) * key_stride + m * D;
        const T* level_value = value + level_offset;
        T* level_grad = grad_value + level_offset;
        for (int64_t p = 0; p < s.num_points; ++p) {
          const int64_t si = l * s.num_points + p;
          Corners<T, int64_t> c;
          if (!sample_corners<T, int64_t>(row_loc[2 * si],
                                          row_loc[2 * si + 1], height, width,
                                          &c)) {
            continue;
          }
          const T w = row_attn[si];
          const T* corner[4];
          T* grad_corner[4];
          for (int k = 0; k < 4; ++k) {
            corner[k] =
                c.valid[k] ? level_value + c.key[k] * key_stride : nullptr;
            grad_corner[k] =
                c.valid[k] ? level_grad + c.key[k] * key_stride : nullptr;
          }
          T g_attn = T(0), g_w = T(0), g_h = T(0);
          for (int64_t d = 0; d < D; ++d) {
            const T top = go[d];
            const T top_w = top * w;
            const T v1 = corner[0] ? corner[0][d] : T(0);
            const T v2 = corner[1] ? corner[1][d] : T(0);
            const T v3 = corner[2] ? corner[2][d] : T(0);
            const T v4 = corner[3] ? corner[3][d] : T(0);
            g_attn += top * msda_detail::bilinear(c, v1, v2, v3, v4);
            g_w += msda_detail::grad_w_weight(c, v1, v2, v3, v4) * top_w;
            g_h += msda_detail::grad_h_weight(c, v1, v2, v3, v4) * top_w;
            for (int k = 0; k < 4; ++k) {
              if (grad_corner[k]) grad_corner[k][d] += c.weight[k] * top_w;
            }
          }
          row_grad_attn[si] = g_attn;
          row_grad_loc[2 * si] = static_cast<T>(width) * g_w;
          row_grad_loc[2 * si + 1] = static_cast<T>(height) * g_h;
        }
      }
    }
  }
}

#define VISDET_INSTANTIATE(T)                                                 \
  template void msda_forward_cpu<T>(const T*, const int64_t*, const int64_t*, \
                                    const T*, const T*, const MSDAShape&,     \
                                    int64_t, int64_t, T*);                    \
  template void msda_backward_cpu<T>(const T*, const T*, const int64_t*,      \
                                     const int64_t*, const T*, const T*,      \
                                     const MSDAShape&, int64_t, int64_t, T*,  \
                                     T*, T*);
VISDET_INSTANTIATE(float)
VISDET_INSTANTIATE(double)
#undef VISDET_INSTANTIATE

}  // namespace visdet_ops
