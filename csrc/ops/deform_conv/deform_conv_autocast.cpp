// deform_conv2d under torch.autocast: like a convolution (torch casts
// conv2d's arguments to the autocast dtype): input, offset, mask, weight and
// bias all go to the autocast dtype (float16/bfloat16; mmcv casts input and
// weight to the offset's dtype for the same reason). The kernels sample in
// float32 and the GEMMs accumulate in float32; the output has the autocast
// dtype, and each gradient comes back in its argument's dtype through the
// casts (float32 for a float32 weight). float64 arguments are left alone.
#include "common/autocast.h"

namespace visdet_ops {
namespace {

template <c10::DispatchKey kKey, c10::DeviceType kDevice>
at::Tensor deform_conv2d_autocast(
    const at::Tensor& input, const at::Tensor& offset,
    const std::optional<at::Tensor>& mask, const at::Tensor& weight,
    const std::optional<at::Tensor>& bias, int64_t stride_h, int64_t stride_w,
    int64_t pad_h, int64_t pad_w, int64_t dilation_h, int64_t dilation_w,
    int64_t groups, int64_t deform_groups, int64_t im2col_step) {
  c10::impl::ExcludeDispatchKeyGuard no_autocast(kKey);
  static const auto op =
      find_op<at::Tensor(const at::Tensor&, const at::Tensor&,
                         const std::optional<at::Tensor>&, const at::Tensor&,
                         const std::optional<at::Tensor>&, int64_t, int64_t,
                         int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                         int64_t)>("visdet_ops::deform_conv2d");
  const at::ScalarType to = autocast_dtype(kDevice);
  return op.call(autocast_to(to, input, kDevice), autocast_to(to, offset, kDevice),
                 autocast_to(to, mask, kDevice), autocast_to(to, weight, kDevice),
                 autocast_to(to, bias, kDevice), stride_h, stride_w, pad_h,
                 pad_w, dilation_h, dilation_w, groups, deform_groups,
                 im2col_step);
}

}  // namespace

TORCH_LIBRARY_IMPL(visdet_ops, Autocast, m) {
  VISDET_AUTOCAST_IMPL(m, "deform_conv2d", deform_conv2d_autocast);
}

TORCH_LIBRARY_IMPL(visdet_ops, AutocastCPU, m) {
  VISDET_AUTOCAST_CPU_IMPL(m, "deform_conv2d", deform_conv2d_autocast);
}

}  // namespace visdet_ops
