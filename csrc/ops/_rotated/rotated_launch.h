// Torch-free declarations the rotated-box ops' CPU loops share.
#pragma once

#include <cstdint>
#include <functional>

namespace visdet_ops {

// The host's parallel loop (host::parallel_for, torch's thread pool), handed
// to the CPU loops of box_iou_rotated and nms_rotated so that they stay
// torch-free: parallel(begin, end, grain, body) calls body(b, e) on disjoint
// ranges covering [begin, end), each of about grain items or more, possibly
// at once on several threads. rotated_parallel_range() (rotated.h) is the
// host's.
using ParallelRange =
    std::function<void(int64_t begin, int64_t end, int64_t grain,
                       const std::function<void(int64_t, int64_t)>& body)>;

// The storage type of the boxes a CUDA launcher reads (float16 / bfloat16 are
// computed in float), passed beside void pointers so that the launch headers
// stay free of cuda_fp16.
enum class RotatedDtype { kFloat, kDouble, kHalf, kBFloat16 };

}  // namespace visdet_ops
