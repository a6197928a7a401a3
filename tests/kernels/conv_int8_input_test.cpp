// Unit tests for kernels/cpu/conv_int8_input.h: the NCHW -> NHWC byte transpose against its _ref
// loops, byte for byte, at every ISA level this machine supports, over shapes that are no
// multiple of the 16 x 32 tile (the shifted last tiles), under a tile (the scalar loops), and
// the zoo CNN's; plus the reference against the definition.
#include "kernels/cpu/conv_int8_input.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "kernels/cpu_isa.h"
#include "tests/kernels/isa_levels.h"

namespace qsync {
namespace {

using testing::isa_levels;
using testing::IsaCap;

std::vector<int8_t> random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int8_t> v(n);
  for (int8_t& b : v) b = static_cast<int8_t>(rng());
  return v;
}

TEST(Int8NchwToNhwc, ReferenceMovesEveryByteToItsChannelLastPlace) {
  const int64_t n = 2, c = 3, hw = 5;
  std::vector<int8_t> src(n * c * hw);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<int8_t>(i);
  std::vector<int8_t> dst(src.size(), -1);
  int8_nchw_to_nhwc_ref(src.data(), n, c, hw, dst.data());
  for (int64_t s = 0; s < n; ++s)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t p = 0; p < hw; ++p)
        ASSERT_EQ(dst[(s * hw + p) * c + ch], src[(s * c + ch) * hw + p]) << s << " " << ch << " " << p;
}

TEST(Int8NchwToNhwc, EveryIsaLevelMatchesTheReferenceOnAwkwardShapes) {
  struct Shape {
    int64_t n, c, hw;
  };
  // Tiles exactly (16 x 32), shifted last tiles in either dimension or both, under a tile in
  // either (scalar loops), one channel, and the zoo CNN's (32 x 28x28, 64 x 14x14).
  const Shape shapes[] = {{1, 16, 32}, {2, 32, 64}, {3, 17, 33}, {2, 40, 100}, {1, 31, 47}, {2, 15, 64},
                          {2, 64, 31}, {3, 1, 784}, {2, 3, 50}, {9, 32, 784}, {5, 64, 196}, {1, 48, 49}};
  uint64_t seed = 1;
  for (const Shape& sh : shapes) {
    const std::vector<int8_t> src = random_bytes(size_t(sh.n * sh.c * sh.hw), seed++);
    std::vector<int8_t> want(src.size());
    int8_nchw_to_nhwc_ref(src.data(), sh.n, sh.c, sh.hw, want.data());
    for (CpuIsa isa : isa_levels()) {
      IsaCap cap(isa);
      std::vector<int8_t> got(src.size() + 64, 7);  // canaries past the end
      int8_nchw_to_nhwc(src.data(), sh.n, sh.c, sh.hw, got.data());
      for (size_t i = 0; i < src.size(); ++i)
        ASSERT_EQ(got[i], want[i]) << "isa " << cpu_isa_name(isa) << " shape " << sh.n << "x" << sh.c << "x" << sh.hw
                                   << " byte " << i;
      for (size_t i = src.size(); i < got.size(); ++i) ASSERT_EQ(got[i], 7) << "wrote past the end at " << i;
    }
  }
}

}  // namespace
}  // namespace qsync
