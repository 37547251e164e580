// The rotated-box ops' shared host code (rotated.h).
#include "rotated.h"

#include <string>

#include "common/checks.h"
#include "common/host.h"

namespace visdet_ops {

using host::Tensor;

void check_rotated_boxes(const char* op, const Tensor& boxes, const char* arg,
                         const char* shape) {
  const std::string what = std::string(shape) + " (x, y, w, h, angle)";
  check_dim(boxes, 2, op, arg);
  check_size(boxes, 1, 5, op, arg, what.c_str());
  check_floating(boxes, op, arg);
}

ParallelRange rotated_parallel_range() {
  return [](int64_t begin, int64_t end, int64_t grain,
            const std::function<void(int64_t, int64_t)>& body) {
    host::parallel_for(begin, end, grain, body);
  };
}

RotatedDtype rotated_dtype(const char* op, host::ScalarType dtype) {
  using host::ScalarType;
  switch (dtype) {
    case ScalarType::Float:
      return RotatedDtype::kFloat;
    case ScalarType::Double:
      return RotatedDtype::kDouble;
    case ScalarType::Half:
      return RotatedDtype::kHalf;
    case ScalarType::BFloat16:
      return RotatedDtype::kBFloat16;
    default:
      VISDET_CHECK(false, op,
                   ": CUDA supports float16, bfloat16, float32 and float64 "
                   "boxes, got ",
                   dtype);
      return RotatedDtype::kFloat;  // unreachable
  }
}

}  // namespace visdet_ops
