// deform_conv: CPU loops over deform_conv_kernel.h (no torch headers). The
// host layer parallelises the calls: im2col over sample ranges, col2im over
// images (the grad_input of one image is written by its own samples only).
#include "deform_conv_kernel.h"
#include "deform_conv_launch.h"

namespace visdet_ops {
namespace {

template <typename T>
struct Identity {
  T operator()(T v) const { return v; }
};

}  // namespace

template <typename T>
void deform_conv_im2col_cpu(const T* input, const T* offset, const T* mask,
                            const DeformConvShape& s, int64_t begin,
                            int64_t end, T* columns) {
  const int64_t cpg = s.channels_per_group();
  for (int64_t sample = begin; sample < end; ++sample) {
    deform_conv_detail::im2col_sample<T>(sample, 0, cpg, input, offset, mask,
                                         s, columns, Identity<T>(),
                                         Identity<T>());
  }
}

template <typename T>
void deform_conv_col2im_cpu(const T* input, const T* offset, const T* mask,
                            T* columns, const DeformConvShape& s,
                            int64_t image, T* grad_input, T* grad_offset,
                            T* grad_mask) {
  const int64_t cpg = s.channels_per_group();
  const int64_t plane = s.out_plane();
  auto add_pair = [grad_input](int64_t index, T a, T b, bool use_a, bool use_b) {
    if (use_a) grad_input[index] += a;
    if (use_b) grad_input[index + 1] += b;
  };
  const int64_t points = s.deform_groups * s.kernel_points();
  for (int64_t sample = 0; sample < points * plane; ++sample) {
    const int64_t point = sample / plane;
    const int64_t pixel = sample - point * plane;
    const int64_t index = point * s.columns_width() + image * plane + pixel;
    const deform_conv_detail::Sample<T> p =
        deform_conv_detail::locate<T>(index, offset, mask, s, Identity<T>());
    const deform_conv_detail::SampleGrad<T> g =
        deform_conv_detail::col2im_sample<T>(p, 0, cpg, input, columns, s,
                                             Identity<T>(), Identity<T>(), add_pair);
    grad_offset[p.offset_index] = g.y;
    grad_offset[p.offset_index + plane] = g.x;
    if (mask != nullptr) grad_mask[p.mask_index] = g.m;
  }
}

#define VISDET_INSTANTIATE(T)                                               \
  template void deform_conv_im2col_cpu<T>(const T*, const T*, const T*,     \
                                          const DeformConvShape&, int64_t,  \
                                          int64_t, T*);                     \
  template void deform_conv_col2im_cpu<T>(const T*, const T*, const T*,     \
                                          T*, const DeformConvShape&,       \
                                          int64_t, T*, T*, T*);
VISDET_INSTANTIATE(float)
VISDET_INSTANTIATE(double)
#undef VISDET_INSTANTIATE

}  // namespace visdet_ops
