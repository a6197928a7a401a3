// Unit tests for kernels/quantize.h: amax, the INT8 scales, RNE and stochastic quantization
// (error bounds, ties, saturation, per-row scales, unbiasedness, seeded determinism), the
// stochastic noise's golden values, and the vectorized kernels against the _ref functions,
// bit for bit, at every ISA level this machine supports.
#include "kernels/quantize.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu_isa.h"
#include "kernels/float_convert.h"
#include "tests/kernels/isa_levels.h"

namespace qsync {
namespace {

using testing::isa_levels;
using testing::IsaCap;

std::vector<float> normal_floats(size_t n, float sigma, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Normal values plus NaN, +-inf, huge, tiny, exact .5 ties (at scale 1) and signed zeros.
std::vector<float> awkward_floats(size_t n, uint64_t seed) {
  std::vector<float> v = normal_floats(n, 3.0f, seed);
  std::mt19937_64 rng(seed + 1);
  const float special[] = {NAN,  -NAN,  INFINITY, -INFINITY, 1e30f,   -1e30f, 1e-40f, 0.5f,
                           1.5f, -2.5f, 126.5f,   -127.5f,   127.49f, 0.0f,   -0.0f,  200.0f};
  for (size_t i = 0; i < n; i += 1 + rng() % 29) v[i] = special[rng() % std::size(special)];
  return v;
}

// Error of a round trip at one scale: |x - q * scale| over all finite x.
float max_roundtrip_error(const std::vector<float>& x, const std::vector<int8_t>& q, float scale) {
  std::vector<float> back(x.size());
  dequantize_int8(q.data(), back.data(), static_cast<int64_t>(x.size()), scale);
  float e = 0.0f;
  for (size_t i = 0; i < x.size(); ++i) e = std::max(e, std::fabs(x[i] - back[i]));
  return e;
}

// Rounding-error slack of the bounds below, derived for |x| <= 127 * scale: 1/scale is
// rounded (rel. error <= 2^-24), x * inv is rounded (2^-24), q * scale is rounded (2^-24), so
// x / scale is off by at most 127 * 2^-23 and q * scale by 127 * 2^-24 units of scale. Twice
// that (127 * 2^-22 * scale) covers it with room.
float slack(float scale) { return 127.0f * 0x1p-22f * scale; }

TEST(QuantizeRef, AmaxAndScales) {
  const float x[] = {1.0f, -7.5f, NAN, 3.0f, -0.0f};
  EXPECT_EQ(amax_ref(x, 5), 7.5f);
  EXPECT_EQ(amax_ref(x, 0), 0.0f);
  const float nans[] = {NAN, -NAN};
  EXPECT_EQ(amax_ref(nans, 2), 0.0f);  // NaN is ignored
  const float inf[] = {1.0f, -INFINITY};
  EXPECT_EQ(amax_ref(inf, 2), INFINITY);
  EXPECT_EQ(int8_scale_from_amax(0.0f), 1.0f);
  EXPECT_EQ(int8_scale_from_amax(254.0f), 2.0f);
  EXPECT_EQ(fp8_scale_from_amax(0.0f, 448.0f), 1.0f);
  EXPECT_EQ(fp8_scale_from_amax(896.0f, 448.0f), 2.0f);
  EXPECT_EQ(fp8_scale_from_amax(57344.0f, 57344.0f), 1.0f);
  float rows[2];
  const float m[] = {1.0f, -2.0f, 3.0f, -4.0f, 0.5f, NAN};
  amax_rows_ref(m, 2, 3, rows);
  EXPECT_EQ(rows[0], 3.0f);
  EXPECT_EQ(rows[1], 4.0f);
}

TEST(QuantizeRef, NearestEvenTiesAndSaturation) {
  const float x[] = {0.5f,    1.5f,     2.5f,     -0.5f,     -1.5f, 126.5f, 127.5f,
                     1000.0f, -1000.0f, INFINITY, -INFINITY, NAN,   -0.0f};
  const int8_t want[] = {0, 2, 2, 0, -2, 126, 127, 127, -127, 127, -127, 0, 0};
  int8_t q[std::size(x)];
  quantize_int8_ref(x, q, std::size(x), 1.0f, Rounding::NEAREST_EVEN, 0);
  for (size_t i = 0; i < std::size(x); ++i) EXPECT_EQ(q[i], want[i]) << "x = " << x[i];
  quantize_int8_ref(x, q, std::size(x), 1.0f, Rounding::STOCHASTIC, 5);
  for (size_t i = 7; i < std::size(x); ++i) EXPECT_EQ(q[i], want[i]) << "x = " << x[i];
}

// Golden values computed independently (Python, arbitrary-precision integers) from the
// definition in ref/quantize_ref.cpp; the CUDA implementation must reproduce them too.
TEST(QuantizeRef, StochasticUniformGoldenValues) {
  // The two 16-bit halves of the first two hashes of seed 0, low then high (mix64(0) is 0, so
  // these are lowbias32(0x9e3779b9) = 0x01fce552 and lowbias32(2 * 0x9e3779b9 mod 2^32) = 0x04f8d29e).
  EXPECT_EQ(stochastic_uniform(0, 0), 58706 * 0x1p-16f);
  EXPECT_EQ(stochastic_uniform(0, 1), 508 * 0x1p-16f);
  EXPECT_EQ(stochastic_uniform(0, 2), 53918 * 0x1p-16f);
  EXPECT_EQ(stochastic_uniform(0, 3), 1272 * 0x1p-16f);
  EXPECT_EQ(stochastic_uniform(1, 0), 59783 * 0x1p-16f);
  EXPECT_EQ(stochastic_uniform(7, 6), 35119 * 0x1p-16f);
  EXPECT_EQ(stochastic_uniform(42, 1000), 36162 * 0x1p-16f);
  EXPECT_EQ(stochastic_uniform(0xdeadbeefcafef00dull, 123456789012ull), 35840 * 0x1p-16f);
  EXPECT_EQ(stochastic_uniform(~0ull, ~0ull), 13829 * 0x1p-16f);
}

TEST(QuantizeRef, StochasticUniformIsUniform) {
  // Mean of N draws of U[0,1): variance 1/12, standard error sqrt(1/(12 N)); 5 standard
  // errors fail a correct generator with probability < 1e-6. (The 2^-16 grid shifts the mean
  // by 2^-17, far below that.)
  const int n = 1 << 20;
  double sum = 0.0;
  for (int i = 0; i < n; ++i) {
    const float u = stochastic_uniform(1234, static_cast<uint64_t>(i));
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    ASSERT_EQ(u * 0x1p16f, std::floor(u * 0x1p16f));  // on the 2^-16 grid
    sum += u;
  }
  EXPECT_NEAR(sum / n, 0.5, 5.0 * std::sqrt(1.0 / (12.0 * n)));
}

TEST(QuantizeRef, StochasticUniformNeighboursUncorrelated) {
  // Two halves of one hash (lag 1), neighbouring hashes (lag 2, 3) and the hashes one AVX2 or
  // AVX-512 block apart (lag 16, 32): the sample correlation of n pairs of independent uniforms
  // has standard error 1 / sqrt(n); 5 of them fail a correct generator with probability < 1e-6.
  const int n = 1 << 20;
  for (const int lag : {1, 2, 3, 16, 32}) {
    double sx = 0.0, sy = 0.0, sxy = 0.0, sxx = 0.0, syy = 0.0;
    for (int i = 0; i < n; ++i) {
      const double x = stochastic_uniform(99, static_cast<uint64_t>(i));
      const double y = stochastic_uniform(99, static_cast<uint64_t>(i + lag));
      sx += x, sy += y, sxy += x * y, sxx += x * x, syy += y * y;
    }
    const double cov = sxy / n - (sx / n) * (sy / n);
    const double r = cov / std::sqrt((sxx / n - (sx / n) * (sx / n)) * (syy / n - (sy / n) * (sy / n)));
    EXPECT_LT(std::fabs(r), 5.0 / std::sqrt(double(n))) << "lag " << lag;
  }
}

TEST(Quantize, RoundTripErrorBounds) {
  const std::vector<float> x = normal_floats(100003, 2.0f, 1);
  const float s = int8_scale_from_amax(amax(x.data(), static_cast<int64_t>(x.size())));
  std::vector<int8_t> q(x.size());
  // RNE: |x / s - q| <= 1/2, so |x - q s| <= s / 2 plus rounding slack.
  quantize_int8(x.data(), q.data(), static_cast<int64_t>(x.size()), s, Rounding::NEAREST_EVEN, 0);
  EXPECT_LE(max_roundtrip_error(x, q, s), 0.5f * s + slack(s));
  int peak = 0;
  for (int8_t v : q) peak = std::max(peak, std::abs(static_cast<int>(v)));
  EXPECT_EQ(peak, 127);  // amax maps onto the end of the range
  // Stochastic: q = floor(x / s + u), u in [0, 1), so |x / s - q| < 1: |x - q s| < s (+ slack).
  quantize_int8(x.data(), q.data(), static_cast<int64_t>(x.size()), s, Rounding::STOCHASTIC, 9);
  EXPECT_LT(max_roundtrip_error(x, q, s), s + slack(s));
}

TEST(Quantize, SaturatesPastAmax) {
  const std::vector<float> x = normal_floats(4096, 1.0f, 2);
  const float s = int8_scale_from_amax(0.5f);  // amax far below the data's: most values overflow
  for (Rounding r : {Rounding::NEAREST_EVEN, Rounding::STOCHASTIC}) {
    std::vector<int8_t> q(x.size());
    quantize_int8(x.data(), q.data(), 4096, s, r, 3);
    for (size_t i = 0; i < x.size(); ++i) {
      // |x| > 0.6 is x / s > 152 > 127.5, past saturation whatever the rounding or noise.
      if (std::fabs(x[i]) > 0.6f) {
        ASSERT_EQ(q[i], x[i] > 0 ? 127 : -127) << x[i];
      }
      ASSERT_GE(q[i], -127);  // never -128
    }
  }
}

TEST(Quantize, PerRowScales) {
  const int64_t rows = 7, cols = 33;
  std::vector<float> x = normal_floats(rows * cols, 1.0f, 4);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c)
      x[r * cols + c] *= std::ldexp(1.0f, static_cast<int>(r) * 3 - 9);
  }
  std::vector<float> am(rows), scales(rows);
  amax_rows(x.data(), rows, cols, am.data());
  for (int64_t r = 0; r < rows; ++r) scales[r] = int8_scale_from_amax(am[r]);
  std::vector<int8_t> q(x.size());
  quantize_int8_rows(x.data(), q.data(), rows, cols, scales.data(), Rounding::NEAREST_EVEN, 0);
  for (int64_t r = 0; r < rows; ++r) {
    int peak = 0;
    float err = 0.0f;
    for (int64_t c = 0; c < cols; ++c) {
      const int8_t v = q[r * cols + c];
      peak = std::max(peak, std::abs(static_cast<int>(v)));
      err = std::max(err, std::fabs(x[r * cols + c] - v * scales[r]));
    }
    EXPECT_EQ(peak, 127) << "row " << r;  // each row's amax maps onto the full range
    EXPECT_LE(err, 0.5f * scales[r] + slack(scales[r])) << "row " << r;
  }
}

TEST(Quantize, AllZeroTensor) {
  std::vector<float> x(1000, 0.0f);
  x[3] = -0.0f;
  const float s = int8_scale_from_amax(amax(x.data(), 1000));
  EXPECT_EQ(s, 1.0f);
  for (Rounding r : {Rounding::NEAREST_EVEN, Rounding::STOCHASTIC}) {
    std::vector<int8_t> q(1000, 5);
    quantize_int8(x.data(), q.data(), 1000, s, r, 7);
    EXPECT_TRUE(std::all_of(q.begin(), q.end(), [](int8_t v) { return v == 0; }));
    std::vector<float> back(1000, 1.0f);
    dequantize_int8(q.data(), back.data(), 1000, s);
    EXPECT_TRUE(std::all_of(back.begin(), back.end(), [](float v) { return v == 0.0f; }));
  }
}

TEST(Quantize, StochasticIsUnbiased) {
  const int64_t n = 1 << 20;
  // A constant x whose x / s = 10.3 exactly in FP32 (s is a power of two): q is 10 or 11, and
  // q - x/s is Bernoulli with variance f (1 - f), f = 0.3. The mean over n has standard error
  // sqrt(f (1 - f) / n) ~ 4.5e-4; 5 of them (false failure < 1e-6) is 2.2e-3, while round to
  // nearest would be off by 0.3. The noise grid (2^-16) biases each element by < 2^-16, added in.
  const float s = 0x1p-7f;
  const float y = 10.3f;
  const double f = static_cast<double>(y) - 10.0;
  std::vector<float> x(n, y * s);
  std::vector<int8_t> q(n);
  quantize_int8(x.data(), q.data(), n, s, Rounding::STOCHASTIC, 77);
  double sum = 0.0;
  for (int8_t v : q) sum += v;
  EXPECT_NEAR(sum / n, static_cast<double>(y), 5.0 * std::sqrt(f * (1.0 - f) / n) + 0x1p-16);

  // Random x: the mean of (deq(q(x)) - x) / s. Each term is a zero-mean variable in (-1, 1)
  // with variance <= 1/4, so the standard error is <= 0.5 / sqrt(n); 5 of them, plus the
  // per-element rounding slack (slack(s) / s) and the noise grid's bias (< 2^-16), bounds the mean.
  const std::vector<float> r = normal_floats(n, 1.0f, 5);
  const float rs = int8_scale_from_amax(amax(r.data(), n));
  quantize_int8(r.data(), q.data(), n, rs, Rounding::STOCHASTIC, 78);
  std::vector<float> back(n);
  dequantize_int8(q.data(), back.data(), n, rs);
  double err = 0.0;
  for (int64_t i = 0; i < n; ++i) err += (static_cast<double>(back[i]) - r[i]) / rs;
  EXPECT_NEAR(err / n, 0.0, 5.0 * 0.5 / std::sqrt(static_cast<double>(n)) + slack(rs) / rs + 0x1p-16);
}

TEST(Quantize, StochasticSeededDeterminism) {
  const int64_t n = 300001;
  const std::vector<float> x = normal_floats(n, 1.0f, 6);
  const float s = int8_scale_from_amax(amax(x.data(), n));
  std::vector<int8_t> a(n), b(n), c(n), one_thread(n);
  quantize_int8(x.data(), a.data(), n, s, Rounding::STOCHASTIC, 1);
  quantize_int8(x.data(), b.data(), n, s, Rounding::STOCHASTIC, 1);
  quantize_int8(x.data(), c.data(), n, s, Rounding::STOCHASTIC, 2);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  quantize_int8(x.data(), one_thread.data(), n, s, Rounding::STOCHASTIC, 1);
  omp_set_num_threads(threads);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a, one_thread);  // the thread count never changes a bit
  // A different seed changes many elements: each differs with probability 2 f (1 - f) for
  // its fractional part f, about 1/3 on average; 10% is far below that.
  int64_t differ = 0;
  for (int64_t i = 0; i < n; ++i) differ += a[i] != c[i];
  EXPECT_GT(differ, n / 10);
}

class QuantizeVector : public ::testing::TestWithParam<CpuIsa> {};

TEST_P(QuantizeVector, MatchesRefBitExact) {
  IsaCap cap(GetParam());
  const std::vector<float> x = awkward_floats(1000004, 8);
  const float* xs = x.data() + 1;  // an unaligned start
  for (int64_t n : {0, 1, 15, 17, 63, 65, 1000003}) {
    SCOPED_TRACE("n = " + std::to_string(n));
    EXPECT_EQ(std::bit_cast<uint32_t>(amax(xs, n)), std::bit_cast<uint32_t>(amax_ref(xs, n)));
    for (float s :
         {int8_scale_from_amax(amax_ref(xs, n)), int8_scale_from_amax(3.0f), 1.0f, 1e-30f}) {
      for (Rounding r : {Rounding::NEAREST_EVEN, Rounding::STOCHASTIC}) {
        std::vector<int8_t> got(n + 1), want(n + 1);
        quantize_int8(xs, got.data(), n, s, r, 99);
        quantize_int8_ref(xs, want.data(), n, s, r, 99);
        ASSERT_EQ(got, want) << "scale " << s << " rounding " << static_cast<int>(r);
        std::vector<float> back(n + 1), back_ref(n + 1);
        dequantize_int8(got.data(), back.data(), n, s);
        dequantize_int8_ref(got.data(), back_ref.data(), n, s);
        ASSERT_EQ(0, std::memcmp(back.data(), back_ref.data(), back.size() * sizeof(float)));
      }
    }
  }
  // Every int8 value, at awkward lengths.
  std::vector<int8_t> all(256 * 5 + 3);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int8_t>(i * 7);
  std::vector<float> back(all.size()), back_ref(all.size());
  dequantize_int8(all.data(), back.data(), static_cast<int64_t>(all.size()), 0.0371f);
  dequantize_int8_ref(all.data(), back_ref.data(), static_cast<int64_t>(all.size()), 0.0371f);
  EXPECT_EQ(back, back_ref);
  // Row-wise, short and long rows (the long ones take the parallel-within-row path).
  for (auto [rows, cols] :
       {std::pair<int64_t, int64_t>{3, 17}, {129, 65}, {1000, 1000}, {2, 70001}, {1, 0}}) {
    SCOPED_TRACE("rows = " + std::to_string(rows) + ", cols = " + std::to_string(cols));
    std::vector<float> am(rows), am_ref(rows), scales(rows);
    amax_rows(xs, rows, cols, am.data());
    amax_rows_ref(xs, rows, cols, am_ref.data());
    ASSERT_EQ(am, am_ref);
    for (int64_t i = 0; i < rows; ++i) scales[i] = int8_scale_from_amax(std::min(am[i], 50.0f));
    for (Rounding r : {Rounding::NEAREST_EVEN, Rounding::STOCHASTIC}) {
      std::vector<int8_t> got(rows * cols), want(rows * cols);
      quantize_int8_rows(xs, got.data(), rows, cols, scales.data(), r, 5);
      quantize_int8_rows_ref(xs, want.data(), rows, cols, scales.data(), r, 5);
      ASSERT_EQ(got, want) << "rounding " << static_cast<int>(r);
    }
  }
}

// The masked entry points (a ReLU's mask applied on the fly) give the bits of masking first
// (mask ? x : +0) and of their references, at every length and memory alignment (the stochastic
// index of an element is its flat index either way), NaN and negative values under the mask
// included.
TEST_P(QuantizeVector, MaskedMatchesMaskingFirstBitExact) {
  IsaCap cap(GetParam());
  const std::vector<float> x = awkward_floats(300007, 9);
  std::vector<uint8_t> mask(x.size());
  std::mt19937 rng(10);
  for (uint8_t& m : mask) m = uint8_t(rng() % 3 != 0);  // about 2 of 3 set
  for (int64_t start : {0, 1, 3}) {
    for (int64_t n : {0, 1, 15, 17, 33, 65537, 300000}) {
      SCOPED_TRACE("start = " + std::to_string(start) + ", n = " + std::to_string(n));
      const float* xs = x.data() + start;
      const uint8_t* ms = mask.data() + start;
      std::vector<float> masked(size_t(n) + 1);
      for (int64_t i = 0; i < n; ++i) masked[size_t(i)] = ms[i] != 0 ? xs[i] : 0.0f;
      const float a = amax_masked(xs, ms, n);
      EXPECT_EQ(std::bit_cast<uint32_t>(a), std::bit_cast<uint32_t>(amax_ref(masked.data(), n)));
      EXPECT_EQ(std::bit_cast<uint32_t>(a), std::bit_cast<uint32_t>(amax_masked_ref(xs, ms, n)));
      const float s = int8_scale_from_amax(std::min(a, 50.0f));
      for (Rounding r : {Rounding::NEAREST_EVEN, Rounding::STOCHASTIC}) {
        std::vector<int8_t> got(size_t(n) + 1), want(size_t(n) + 1), ref(size_t(n) + 1);
        quantize_int8_masked(xs, ms, got.data(), n, s, r, 12);
        quantize_int8_ref(masked.data(), want.data(), n, s, r, 12);
        quantize_int8_masked_ref(xs, ms, ref.data(), n, s, r, 12);
        ASSERT_EQ(got, want) << "rounding " << static_cast<int>(r);
        ASSERT_EQ(ref, want) << "rounding " << static_cast<int>(r);
      }
    }
  }
}

// INT8 -> BF16 in one pass gives the bits of the two steps (dequantize, then round to BF16) and
// of its reference, for every int8 value at awkward lengths and starts, at scales whose products
// are ordinary, subnormal in FP32 (the native converter's redo path) and past the largest BF16.
TEST_P(QuantizeVector, DequantizeToBf16MatchesTwoStepsBitExact) {
  IsaCap cap(GetParam());
  std::vector<int8_t> all(256 * 300 + 5);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int8_t>(i * 7 + i / 256);
  for (float s : {0.0371f, 1.0f, 1e-38f, 1e-40f, 2.7e36f, 3e38f}) {
    for (int64_t start : {0, 1, 7}) {
      for (int64_t n : {0, 1, 15, 16, 17, 33, 256 * 300}) {
        SCOPED_TRACE("scale " + std::to_string(s) + ", start " + std::to_string(start) + ", n " + std::to_string(n));
        const int8_t* q = all.data() + start;
        std::vector<float> f(size_t(n) + 1);
        std::vector<uint16_t> want(size_t(n) + 1), ref(size_t(n) + 1), got(size_t(n) + 1);
        dequantize_int8_ref(q, f.data(), n, s);
        for (int64_t i = 0; i < n; ++i) want[size_t(i)] = fp32_to_bf16_ref(f[size_t(i)]);
        dequantize_int8_to_bf16_ref(q, ref.data(), n, s);
        dequantize_int8_to_bf16(q, got.data(), n, s);
        ASSERT_EQ(ref, want);
        ASSERT_EQ(got, want);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(IsaLevels, QuantizeVector, ::testing::ValuesIn(isa_levels()),
                         [](const ::testing::TestParamInfo<CpuIsa>& info) {
                           std::string name = cpu_isa_name(info.param);
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace qsync
