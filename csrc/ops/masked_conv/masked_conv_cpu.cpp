#include "masked_conv_kernel.h"
#include "masked_conv_launch.h"

namespace visdet_ops {

template <typename T>
void masked_im2col_cpu(const T* input, const int64_t* idx,
                       const MaskedConvGeometry& g, int64_t begin, int64_t end,
                       T* cols) {
  auto load = [](T v) { return v; };
  auto cast = [](int v) { return static_cast<T>(v); };
  for (int64_t e = begin; e < end; ++e) {
    cols[e] = masked_conv_detail::im2col_element<T, T>(e, input, idx, g, load,
                                                       cast);
  }
}

template <typename T>
void masked_col2im_cpu(const T* rows, const int64_t* idx, int64_t num_pos,
                       int64_t out_channels, int64_t out_h, int64_t out_w,
                       T* output) {
  for (int64_t p = 0; p < num_pos; ++p) {
    const int64_t n = idx[3 * p], h = idx[3 * p + 1], w = idx[3 * p + 2];
    for (int64_t co = 0; co < out_channels; ++co) {
      output[((n * out_channels + co) * out_h + h) * out_w + w] =
          rows[p * out_channels + co];
    }
  }
}

template <typename T>
void masked_conv_grad_input_cpu(const T* grad_cols, const int64_t* pos_map,
                                const MaskedConvGeometry& g, int64_t begin,
                                int64_t end, T* grad_input) {
  for (int64_t e = begin; e < end; ++e) {
    grad_input[e] =
        masked_conv_detail::grad_input_element<T>(e, grad_cols, pos_map, g);
  }
}

#define VISDET_INSTANTIATE(T)                                                \
  template void masked_im2col_cpu<T>(const T*, const int64_t*,              \
                                     const MaskedConvGeometry&, int64_t,     \
                                     int64_t, T*);                           \
  template void masked_col2im_cpu<T>(const T*, const int64_t*, int64_t,     \
                                     int64_t, int64_t, int64_t, T*);         \
  template void masked_conv_grad_input_cpu<T>(                              \
      const T*, const int64_t*, const MaskedConvGeometry&, int64_t, int64_t, \
      T*);
VISDET_INSTANTIATE(float)
VISDET_INSTANTIATE(double)
#undef VISDET_INSTANTIATE

}  // namespace visdet_ops
