// The CPU kernels' arithmetic, as a program (tests/test_aarch64.py): compiled natively and for aarch64 with the
// build's C++ flags (visdet_build.CXX_FLAGS), both must print the same digests, bit for bit. It drives two
// torch-free kernel headers whose inner loops are chains of products and sums (where a fused multiply-add would
// round differently): the rotated-box geometry (clipping, areas, IoU) and the rotated bilinear sampling, in float
// and double, on inputs from a fixed integer generator (no libm or platform random source in the inputs).
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "ops/_rotated/rotated_kernel.h"
#include "ops/roi_align_rotated/roi_align_rotated_kernel.h"

namespace {

uint64_t state = 0x9E3779B97F4A7C15ull;

// [0, 1) from a 64-bit LCG's top 53 bits: exact, the same on every machine.
double uniform() {
  state = state * 6364136223846793005ull + 1442695040888963407ull;
  return static_cast<double>(state >> 11) * (1.0 / 9007199254740992.0);
}

struct Digest {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the values' bytes
  template <typename A>
  void add(A v) {
    unsigned char b[sizeof(A)];
    std::memcpy(b, &v, sizeof(A));
    for (unsigned char c : b) h = (h ^ c) * 1099511628211ull;
  }
};

template <typename A>
uint64_t boxes(int pairs) {
  using namespace visdet_ops::rotated_detail;
  Digest d;
  for (int i = 0; i < pairs; ++i) {
    const double x = uniform() * 100, y = uniform() * 100, w = uniform() * 30 + 0.1, h = uniform() * 30 + 0.1;
    const double a = (uniform() - 0.5) * 7;
    const double x2 = x + (uniform() - 0.5) * 20, y2 = y + (uniform() - 0.5) * 20;
    const double w2 = uniform() * 30 + 0.1, h2 = uniform() * 30 + 0.1;
    const double a2 = i % 5 == 0 ? a : (uniform() - 0.5) * 7;  // every fifth pair parallel
    const auto p = make_box<A>(A(x), A(y), A(w), A(h), A(a), i % 2 == 0);
    const auto q = make_box<A>(A(x2), A(y2), A(w2), A(h2), A(a2), i % 2 == 0);
    d.add(overlap(p, q, false));
    d.add(overlap(p, q, true));
  }
  return d.h;
}

template <typename A>
uint64_t samples(int rois) {
  using namespace visdet_ops::roi_align_rotated_detail;
  Digest d;
  const int64_t height = 40, width = 48;
  for (int k = 0; k < rois; ++k) {
    const A roi[6] = {A(0), A(uniform() * 50), A(uniform() * 45), A(uniform() * 30 + 1), A(uniform() * 30 + 1),
                      A((uniform() - 0.5) * 7)};
    const auto g = rotated_geometry(roi, A(0.5), 7, 7, k % 3, k % 2 == 0, k % 4 < 2, height, width);
    for (int32_t b = 0; b < 49; ++b) {
      for (int j = 0; j < g.grid_h * g.grid_w; ++j) {
        const auto s = rotated_sample<A, int32_t>(g, 7, int32_t(height), int32_t(width), b, j);
        d.add(s.y_low);
        d.add(s.x_low);
        d.add(s.w1);
        d.add(s.w2);
        d.add(s.w3);
        d.add(s.w4);
      }
    }
  }
  return d.h;
}

}  // namespace

int main() {
  std::printf("boxes float %016llx\n", static_cast<unsigned long long>(boxes<float>(50000)));
  std::printf("boxes double %016llx\n", static_cast<unsigned long long>(boxes<double>(50000)));
  std::printf("samples float %016llx\n", static_cast<unsigned long long>(samples<float>(400)));
  std::printf("samples double %016llx\n", static_cast<unsigned long long>(samples<double>(400)));
  return 0;
}
