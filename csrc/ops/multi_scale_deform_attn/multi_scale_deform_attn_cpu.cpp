#include <vector>

#include "multi_scale_deform_attn_kernel.h"
#include "multi_scale_deform_attn_launch.h"

namespace visdet_ops {

using msda_detail::Corners;
using msda_detail::sample_corners;

template <typename T>
void msda_forward_cpu(const T* value, const int64_t* spatial_shapes,
                      const int64_t* level_start, const acc_t<T>* loc,
                      const acc_t<T>* attn, const MSDAShape& s, int64_t begin,
                      int64_t end, T* out) {
  using A = acc_t<T>;
  const int64_t D = s.head_dim, M = s.num_heads;
  const int64_t key_stride = M * D;  // one key of value
  const int64_t samples = s.num_levels * s.num_points;
  std::vector<A> acc(static_cast<size_t>(D));
  for (int64_t row = begin; row < end; ++row) {
    const int64_t m = row % M;
    const int64_t b = row / M / s.num_queries;
    for (int64_t d = 0; d < D; ++d) acc[d] = A(0);
    const A* row_loc = loc + row * samples * 2;
    const A* row_attn = attn + row * samples;
    for (int64_t l = 0; l < s.num_levels; ++l) {
      const int64_t height = spatial_shapes[2 * l];
      const int64_t width = spatial_shapes[2 * l + 1];
      const T* level_value =
          value + (b * s.num_keys + level_start[l]) * key_stride + m * D;
      for (int64_t p = 0; p < s.num_points; ++p) {
        const int64_t si = l * s.num_points + p;
        Corners<A, int64_t> c;
        if (!sample_corners<A, int64_t>(row_loc[2 * si], row_loc[2 * si + 1],
                                        height, width, &c)) {
          continue;
        }
        const A w = row_attn[si];
        const T* corner[4];
        for (int k = 0; k < 4; ++k) {
          corner[k] = c.valid[k] ? level_value + c.key[k] * key_stride : nullptr;
        }
        for (int64_t d = 0; d < D; ++d) {
          const A v1 = corner[0] ? to_acc(corner[0][d]) : A(0);
          const A v2 = corner[1] ? to_acc(corner[1][d]) : A(0);
          const A v3 = corner[2] ? to_acc(corner[2][d]) : A(0);
          const A v4 = corner[3] ? to_acc(corner[3][d]) : A(0);
          acc[d] += msda_detail::bilinear(c, v1, v2, v3, v4) * w;
        }
      }
    }
    T* o = out + row * D;
    for (int64_t d = 0; d < D; ++d) o[d] = from_acc<T>(acc[d]);
  }
}

template <typename T>
void msda_backward_cpu(const T* grad_out, const T* value,
                       const int64_t* spatial_shapes,
                       const int64_t* level_start, const acc_t<T>* loc,
                       const acc_t<T>* attn, const MSDAShape& s, int64_t begin,
                       int64_t end, acc_t<T>* grad_value, acc_t<T>* grad_loc,
                       acc_t<T>* grad_attn) {
  using A = acc_t<T>;
  const int64_t D = s.head_dim, M = s.num_heads;
  const int64_t key_stride = M * D;
  const int64_t samples = s.num_levels * s.num_points;
  for (int64_t pair = begin; pair < end; ++pair) {
    const int64_t b = pair / M;
    const int64_t m = pair % M;
    for (int64_t q = 0; q < s.num_queries; ++q) {
      const int64_t row = (b * s.num_queries + q) * M + m;
      const T* go = grad_out + row * D;
      const A* row_loc = loc + row * samples * 2;
      const A* row_attn = attn + row * samples;
      A* row_grad_loc = grad_loc + row * samples * 2;
      A* row_grad_attn = grad_attn + row * samples;
      for (int64_t l = 0; l < s.num_levels; ++l) {
        const int64_t height = spatial_shapes[2 * l];
        const int64_t width = spatial_shapes[2 * l + 1];
        const int64_t level_offset =
            (b * s.num_keys + level_start[l]) * key_stride + m * D;
        const T* level_value = value + level_offset;
        A* level_grad = grad_value + level_offset;
        for (int64_t p = 0; p < s.num_points; ++p) {
          const int64_t si = l * s.num_points + p;
          Corners<A, int64_t> c;
          if (!sample_corners<A, int64_t>(row_loc[2 * si],
                                          row_loc[2 * si + 1], height, width,
                                          &c)) {
            continue;
          }
          const A w = row_attn[si];
          const T* corner[4];
          A* grad_corner[4];
          for (int k = 0; k < 4; ++k) {
            corner[k] =
                c.valid[k] ? level_value + c.key[k] * key_stride : nullptr;
            grad_corner[k] =
                c.valid[k] ? level_grad + c.key[k] * key_stride : nullptr;
          }
          A g_attn = A(0), g_w = A(0), g_h = A(0);
          for (int64_t d = 0; d < D; ++d) {
            const A top = to_acc(go[d]);
            const A top_w = top * w;
            const A v1 = corner[0] ? to_acc(corner[0][d]) : A(0);
            const A v2 = corner[1] ? to_acc(corner[1][d]) : A(0);
            const A v3 = corner[2] ? to_acc(corner[2][d]) : A(0);
            const A v4 = corner[3] ? to_acc(corner[3][d]) : A(0);
            g_attn += top * msda_detail::bilinear(c, v1, v2, v3, v4);
            g_w += msda_detail::grad_w_weight(c, v1, v2, v3, v4) * top_w;
            g_h += msda_detail::grad_h_weight(c, v1, v2, v3, v4) * top_w;
            for (int k = 0; k < 4; ++k) {
              if (grad_corner[k]) grad_corner[k][d] += c.weight[k] * top_w;
            }
          }
          row_grad_attn[si] = g_attn;
          row_grad_loc[2 * si] = static_cast<A>(width) * g_w;
          row_grad_loc[2 * si + 1] = static_cast<A>(height) * g_h;
        }
      }
    }
  }
}

#define VISDET_INSTANTIATE(T)                                                \
  template void msda_forward_cpu<T>(const T*, const int64_t*, const int64_t*, \
                                    const acc_t<T>*, const acc_t<T>*,        \
                                    const MSDAShape&, int64_t, int64_t, T*); \
  template void msda_backward_cpu<T>(                                        \
      const T*, const T*, const int64_t*, const int64_t*, const acc_t<T>*,   \
      const acc_t<T>*, const MSDAShape&, int64_t, int64_t, acc_t<T>*,        \
      acc_t<T>*, acc_t<T>*);
VISDET_FOR_HOST_FLOATING_TYPES(VISDET_INSTANTIATE)
#undef VISDET_INSTANTIATE

}  // namespace visdet_ops
