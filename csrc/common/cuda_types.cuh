// Kept for .cu files written against its first version: the float16/bfloat16
// conversions now live in common/scalar.h (host and device); these names are
// aliases of those.
#pragma once

#include "common/scalar.h"

namespace visdet_ops {
namespace cuda {

using visdet_ops::acc_t;
using visdet_ops::from_acc;
using visdet_ops::to_acc;

}  // namespace cuda
}  // namespace visdet_ops
