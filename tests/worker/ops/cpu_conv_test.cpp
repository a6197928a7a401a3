// Unit tests for worker/ops/cpu/cpu_conv.cpp's column transforms: im2col of 1-, 2- and 4-byte
// elements against a plain loop over every (tap, sample, output position), on awkward geometries
// (the same-width stride-1 shortcut with kernels 1, 3 and 5, a kernel wider than the image, stride
// 2, no padding, 1-wide images) and sample offsets; values must match exactly, zeros included.
// And the bias pass (conv_bias_grad.cpp): its 16-bit conversion against the scalar encoders on
// masked values, its sums and amax unchanged by converting, and its sums in the one documented
// order at any thread count.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu_isa.h"
#include "kernels/float_convert.h"
#include "worker/ops/cpu/cpu_kernels.h"

namespace qsync {
namespace {

ConvGeometry geometry(int64_t c, int64_t h, int64_t w, int64_t k, int64_t stride, int64_t pad) {
  return {c, h, w, k, stride, pad, (h + 2 * pad - k) / stride + 1, (w + 2 * pad - k) / stride + 1};
}

std::string describe(const ConvGeometry& g) {
  return "c" + std::to_string(g.c) + " " + std::to_string(g.h) + "x" + std::to_string(g.w) + " k" + std::to_string(g.k) +
         " s" + std::to_string(g.stride) + " p" + std::to_string(g.pad);
}

// cols (C k k, S H' W'): row (ci, ky, kx), column (s, oy, ox) = x[s0 + s][ci][oy s - p + ky][ox s - p + kx] or 0.
template <class T>
std::vector<T> plain_im2col(const std::vector<T>& x, int64_t s0, int64_t samples, const ConvGeometry& g) {
  const int64_t hw = g.oh * g.ow, cols = samples * hw;
  std::vector<T> out(size_t(g.c * g.k * g.k * cols));
  for (int64_t ci = 0; ci < g.c; ++ci)
    for (int64_t ky = 0; ky < g.k; ++ky)
      for (int64_t kx = 0; kx < g.k; ++kx)
        for (int64_t s = 0; s < samples; ++s)
          for (int64_t oy = 0; oy < g.oh; ++oy)
            for (int64_t ox = 0; ox < g.ow; ++ox) {
              const int64_t yy = oy * g.stride - g.pad + ky, xx = ox * g.stride - g.pad + kx;
              const bool inside = yy >= 0 && yy < g.h && xx >= 0 && xx < g.w;
              out[size_t(((ci * g.k + ky) * g.k + kx) * cols + s * hw + oy * g.ow + ox)] =
                  inside ? x[size_t((((s0 + s) * g.c + ci) * g.h + yy) * g.w + xx)] : T(0);
            }
  return out;
}

template <class T>
void check_im2col(const ConvGeometry& g) {
  SCOPED_TRACE(describe(g) + ", " + std::to_string(sizeof(T)) + "-byte elements");
  const int64_t batch = 5, s0 = 2, samples = 3;
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> d(1, 100);  // no zeros: a missed copy cannot pass as padding
  std::vector<T> x(size_t(batch * g.c * g.h * g.w));
  for (T& v : x) v = T(d(rng));
  const std::vector<T> want = plain_im2col(x, s0, samples, g);
  std::vector<T> got(want.size(), T(77));  // every value must be written
  im2col(x.data(), int(sizeof(T)), s0, samples, g, got.data());
  ASSERT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(T)), 0);
}

TEST(CpuConv, Im2colMatchesThePlainLoopsExactly) {
  const ConvGeometry geometries[] = {
      geometry(3, 7, 5, 3, 1, 1),  // same width, 3x3
      geometry(2, 6, 9, 5, 1, 2),  // same width, 5x5
      geometry(2, 5, 4, 1, 1, 0),  // 1x1
      geometry(2, 4, 1, 3, 1, 1),  // 1-wide image: every row runs over both edges
      geometry(1, 3, 2, 5, 1, 2),  // kernel wider than the image
      geometry(2, 8, 7, 3, 1, 0),  // stride 1, no padding (narrower output)
      geometry(2, 9, 7, 3, 2, 1),  // stride 2
      geometry(1, 28, 28, 3, 1, 1),  // the zoo CNN's geometry
  };
  for (const ConvGeometry& g : geometries) {
    check_im2col<uint8_t>(g);
    check_im2col<uint16_t>(g);
    check_im2col<uint32_t>(g);
  }
}

// Planes of 5 (all tail), 37 and 2048 + 13 positions (past one conversion chunk, then a tail; and
// enough of them that the channels run in parallel);
// random masks; -0, NaN, inf, subnormals and values halfway between 16-bit neighbours among the
// gradient's values. The converted values must be the scalar encoder's of mask ? dy : +0 (a
// masked -0 or NaN becomes +0), bit for bit, at every ISA level, and db and the amax must be the
// bits of the pass without a conversion.
TEST(CpuConv, BiasPassConvertsTheMaskedGradientAsTheEncodersDo) {
  struct CapGuard {  // the default cap (none: AMX) comes back after the test
    ~CapGuard() { cpu_isa_set_cap(CpuIsa::AMX); }
  } guard;
  const float specials[] = {-0.0f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), 1e-40f, -3e-39f, 1.00390625f, 65520.0f, 1e38f};
  for (const CpuIsa isa : {CpuIsa::SCALAR, CpuIsa::AVX2, CpuIsa::AVX512, CpuIsa::AVX512_BF16}) {
    if (isa > cpu_isa_detected()) continue;
    cpu_isa_set_cap(isa);
    for (const int64_t hw : {int64_t{5}, int64_t{37}, int64_t{2048 + 13}})
      for (const bool masked : {false, true})
        for (const Precision to : {Precision::BF16, Precision::FP16}) {
          SCOPED_TRACE(std::string(cpu_isa_name(isa)) + " hw " + std::to_string(hw) + (masked ? " masked " : " ") +
                       precision_name(to));
          const int64_t batch = hw > 2048 ? 8 : 3, o = 4, n = batch * o * hw;  // 8: past 65536, in parallel
          std::mt19937 rng(static_cast<uint32_t>(hw));
          std::normal_distribution<float> normal(0.0f, 2.0f);
          std::vector<float> dy(static_cast<size_t>(n));
          std::vector<uint8_t> mask(static_cast<size_t>(n));
          for (int64_t i = 0; i < n; ++i) {
            dy[size_t(i)] = i % 11 == 3 ? specials[(i / 11) % 9] : normal(rng);
            mask[size_t(i)] = uint8_t(rng() % 2);
          }
          const uint8_t* m = masked ? mask.data() : nullptr;
          std::vector<float> db_plain(static_cast<size_t>(o), 0.5f), db_converting(static_cast<size_t>(o), 0.5f);
          std::vector<uint16_t> got(static_cast<size_t>(n), 0x7777);
          const float amax_plain = conv_bias_grad_add(dy.data(), m, batch, o, hw, db_plain.data());
          const float amax = conv_bias_grad_add(dy.data(), m, batch, o, hw, db_converting.data(), to, got.data());
          EXPECT_EQ(std::memcmp(&amax, &amax_plain, sizeof amax), 0);
          EXPECT_EQ(std::memcmp(db_converting.data(), db_plain.data(), db_plain.size() * sizeof(float)), 0);
          for (int64_t i = 0; i < n; ++i) {
            const float v = m == nullptr || m[i] != 0 ? dy[size_t(i)] : 0.0f;
            const uint16_t want = to == Precision::BF16 ? fp32_to_bf16_ref(v) : fp32_to_fp16_ref(v);
            ASSERT_EQ(got[size_t(i)], want) << "at " << i << " of " << n << ", dy " << dy[size_t(i)];
          }
        }
  }
}

// The bias pass's documented order, written plainly: per plane, lane j adds the positions j, j + 8,
// ... below the last multiple of 8, then the tail positions in turn; the lanes are added pairwise;
// db takes the planes' sums sample by sample.
float plane_sum_in_order(const float* x, const uint8_t* m, int64_t hw) {
  float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  const int64_t full = hw & ~int64_t{7};
  for (int64_t i = 0; i < hw; ++i) {
    const float v = m == nullptr || m[i] != 0 ? x[i] : 0.0f;
    lane[i < full ? i % 8 : i - full] += v;
  }
  return ((lane[0] + lane[4]) + (lane[1] + lane[5])) + ((lane[2] + lane[6]) + (lane[3] + lane[7]));
}

TEST(CpuConv, BiasPassSumsInTheDocumentedOrderAtAnyThreadCount) {
  const int threads_before = omp_get_max_threads();
  for (const int64_t hw : {int64_t{13}, int64_t{2048 + 5}})
    for (const bool masked : {false, true}) {
      SCOPED_TRACE("hw " + std::to_string(hw) + (masked ? " masked" : ""));
      const int64_t batch = hw > 2048 ? 7 : 1500, o = 5, n = batch * o * hw;  // both past 65536: in parallel
      std::mt19937 rng(static_cast<uint32_t>(hw) + (masked ? 1u : 0u));
      std::normal_distribution<float> normal(0.0f, 3.0f);
      std::vector<float> dy(static_cast<size_t>(n));
      std::vector<uint8_t> mask(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        dy[size_t(i)] = normal(rng);
        mask[size_t(i)] = uint8_t(rng() % 3 != 0);
      }
      const uint8_t* m = masked ? mask.data() : nullptr;
      std::vector<float> want(static_cast<size_t>(o), 0.25f);
      float want_amax = 0.0f;
      for (int64_t s = 0; s < batch; ++s)
        for (int64_t oc = 0; oc < o; ++oc) {
          const int64_t at = (s * o + oc) * hw;
          want[size_t(oc)] += plane_sum_in_order(dy.data() + at, m != nullptr ? m + at : nullptr, hw);
          for (int64_t i = 0; i < hw; ++i)
            if (m == nullptr || m[at + i] != 0) want_amax = std::max(want_amax, std::fabs(dy[size_t(at + i)]));
        }
      for (const int threads : {1, 2, 3}) {
        omp_set_num_threads(threads);
        std::vector<float> db(static_cast<size_t>(o), 0.25f);
        const float amax = conv_bias_grad_add(dy.data(), m, batch, o, hw, db.data());
        EXPECT_EQ(amax, want_amax) << threads << " threads";
        EXPECT_EQ(std::memcmp(db.data(), want.data(), db.size() * sizeof(float)), 0) << threads << " threads";
      }
    }
  omp_set_num_threads(threads_before);
}

}  // namespace
}  // namespace qsync
