// Unit tests for kernels/float_convert.h: the _ref conversions against hand-known values, an
// exhaustive decode of every FP16/BF16/FP8 pattern, an independent nearest-value oracle, and
// the vectorized buffer converters against the _ref functions, bit for bit, at every ISA level
// this machine supports. No tolerances: every comparison is exact (bit patterns).
#include "kernels/float_convert.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu_isa.h"
#include "tests/kernels/isa_levels.h"

namespace qsync {
namespace {

uint32_t bits_of(float x) { return std::bit_cast<uint32_t>(x); }
float from_bits(uint32_t b) { return std::bit_cast<float>(b); }

using testing::isa_levels;
using testing::IsaCap;

// FP32 inputs that hit every code path: specials, format boundaries, exact ties at every
// rounding position, random bit patterns (NaN payloads, subnormals) and ordinary values.
std::vector<float> awkward_floats(size_t n, uint64_t seed) {
  std::vector<float> v;
  const uint32_t special[] = {
      0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00000, 0x7f800001,
      0xff800001, 0x7fa00000, 0x7fffffff, 0x7f802000, 0x7fe00000, 0x00000001, 0x00800000,
      0x7f7fffff, 0xff7fffff, 0x7f7f8000, 0x7f7f7fff, 0x477fe000, 0x477fefff, 0x477ff000,
      0x477ff001, 0x33800000, 0x33000000, 0x33000001, 0x33400000, 0x38800000};
  for (uint32_t s : special) v.push_back(from_bits(s));
  for (float f : {448.0f, 464.0f, 464.0001f, 480.0f, 57344.0f, 61440.0f, 61439.0f, 65504.0f,
                  65520.0f, 0x1p-9f, 0x1p-10f, 0x1.8p-10f, 0x1p-16f, 0x1p-17f, 0x1p-6f, 0x1p-14f}) {
    v.push_back(f);
    v.push_back(-f);
  }
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  while (v.size() < n) {
    const uint32_t r = static_cast<uint32_t>(rng());
    switch (rng() % 4) {
      case 0: v.push_back(from_bits(r)); break;  // any pattern
      case 1: v.push_back(std::ldexp(normal(rng), static_cast<int>(rng() % 60) - 40)); break;
      case 2: {  // exact tie (or tie +-1 ulp) at a random rounding position k
        const int k = 1 + static_cast<int>(rng() % 23);
        const uint32_t low = (1u << (k - 1)) + static_cast<uint32_t>(rng() % 3) - 1u;
        const uint32_t hi = r & ~((1u << k) - 1);
        v.push_back(from_bits(hi | (low & ((1u << k) - 1))));
        break;
      }
      default: v.push_back(normal(rng) * 100.0f); break;
    }
  }
  v.resize(n);
  return v;
}

// Every stride-th FP32 bit pattern (a sweep through all exponents, signs and NaNs).
std::vector<float> fp32_sweep(uint64_t stride) {
  std::vector<float> v;
  for (uint64_t u = 0; u < (1ull << 32); u += stride)
    v.push_back(from_bits(static_cast<uint32_t>(u)));
  return v;
}

// An independent encoder: the nearest of the format's finite values by binary search, ties to
// the even code; finite |x| >= max saturates to max. Only for finite x.
struct NearestOracle {
  std::vector<double> values;  // values[c] = decoded magnitude code c, increasing
  explicit NearestOracle(const std::vector<double>& v) : values(v) {}
  uint32_t encode(float x, int sign_shift) const {
    const double a = std::fabs(static_cast<double>(x));
    const uint32_t sign = std::signbit(x) ? (1u << sign_shift) : 0u;
    if (a >= values.back()) return sign | static_cast<uint32_t>(values.size() - 1);
    const auto hi =
        static_cast<uint32_t>(std::upper_bound(values.begin(), values.end(), a) - values.begin());
    const uint32_t lo = hi - 1;
    const double dl = a - values[lo], dh = values[hi] - a;
    const uint32_t c = dl < dh ? lo : dh < dl ? hi : ((lo & 1u) == 0 ? lo : hi);
    return sign | c;
  }
};

template <class Decode>
NearestOracle oracle_for(uint32_t max_code, Decode decode) {
  std::vector<double> v;
  for (uint32_t c = 0; c <= max_code; ++c) v.push_back(decode(c));
  return NearestOracle(v);
}

uint32_t input_bits(float x) { return bits_of(x); }
uint32_t input_bits(uint16_t x) { return x; }
uint32_t input_bits(uint8_t x) { return x; }

// Runs a buffer converter and its _ref twin; returns the number of mismatched bit patterns.
template <class In, class Out, class Vec, class Ref>
int64_t count_mismatches(const std::vector<In>& in, int64_t offset, int64_t n, Vec vec, Ref ref) {
  std::vector<Out> got(static_cast<size_t>(n + 1), Out{});
  vec(in.data() + offset, got.data(), n);
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    const auto want = ref(in[static_cast<size_t>(offset + i)]);
    if (std::bit_cast<decltype(want)>(got[static_cast<size_t>(i)]) != want) {
      if (++bad <= 3)
        ADD_FAILURE() << "element " << i << ", input bits 0x" << std::hex
                      << input_bits(in[static_cast<size_t>(offset + i)]);
    }
  }
  return bad;
}

TEST(FloatConvertRef, HandKnownFp16) {
  EXPECT_EQ(fp32_to_fp16_ref(1.0f), 0x3c00);
  EXPECT_EQ(fp32_to_fp16_ref(-2.0f), 0xc000);
  EXPECT_EQ(fp32_to_fp16_ref(65504.0f), 0x7bff);
  EXPECT_EQ(fp32_to_fp16_ref(65519.0f), 0x7bff);
  EXPECT_EQ(fp32_to_fp16_ref(65520.0f), 0x7bff);  // IEEE would give inf: we saturate
  EXPECT_EQ(fp32_to_fp16_ref(1e9f), 0x7bff);
  EXPECT_EQ(fp32_to_fp16_ref(-1e9f), 0xfbff);
  EXPECT_EQ(fp32_to_fp16_ref(INFINITY), 0x7c00);
  EXPECT_EQ(fp32_to_fp16_ref(-INFINITY), 0xfc00);
  EXPECT_EQ(fp32_to_fp16_ref(from_bits(0x7fc00000)), 0x7e00);
  EXPECT_EQ(fp32_to_fp16_ref(from_bits(0xff800001)), 0xfe00);  // sNaN -> quiet, same sign
  EXPECT_EQ(fp32_to_fp16_ref(0x1p-24f), 0x0001);               // smallest subnormal
  EXPECT_EQ(fp32_to_fp16_ref(0x1p-25f), 0x0000);               // tie -> even (0)
  EXPECT_EQ(fp32_to_fp16_ref(0x1.8p-24f), 0x0002);             // 1.5 units: tie -> even (2)
  EXPECT_EQ(fp32_to_fp16_ref(0x1p-14f), 0x0400);               // smallest normal
  EXPECT_EQ(fp32_to_fp16_ref(1.0f + 0x1p-11f), 0x3c00);        // tie -> even mantissa
  EXPECT_EQ(fp32_to_fp16_ref(1.0f + 0x3p-11f), 0x3c02);
  EXPECT_EQ(fp32_to_fp16_ref(2049.0f), 0x6800);
  EXPECT_EQ(fp32_to_fp16_ref(-0.0f), 0x8000);
  EXPECT_EQ(fp16_to_fp32_ref(0x0001), 0x1p-24f);
  EXPECT_EQ(fp16_to_fp32_ref(0x7bff), 65504.0f);
}

TEST(FloatConvertRef, HandKnownBf16AndTf32) {
  EXPECT_EQ(fp32_to_bf16_ref(1.0f), 0x3f80);
  EXPECT_EQ(fp32_to_bf16_ref(1.0f + 0x1p-8f), 0x3f80);  // tie -> even
  EXPECT_EQ(fp32_to_bf16_ref(1.0f + 0x3p-8f), 0x3f82);
  EXPECT_EQ(fp32_to_bf16_ref(3.3895314e38f), 0x7f7f);          // max bf16
  EXPECT_EQ(fp32_to_bf16_ref(from_bits(0x7f7fffff)), 0x7f7f);  // RNE would give inf
  EXPECT_EQ(fp32_to_bf16_ref(-INFINITY), 0xff80);
  EXPECT_EQ(fp32_to_bf16_ref(from_bits(0x7f800001)), 0x7fc0);
  EXPECT_EQ(fp32_to_bf16_ref(from_bits(0x7fa00000)), 0x7fe0);  // payload kept, quiet bit set
  EXPECT_EQ(fp32_to_bf16_ref(from_bits(0x00008000)), 0x0000);  // subnormal tie -> even
  EXPECT_EQ(fp32_to_bf16_ref(from_bits(0x00018000)), 0x0002);
  EXPECT_EQ(bf16_to_fp32_ref(0x3f80), 1.0f);
  EXPECT_EQ(fp32_round_to_tf32_ref(1.0f + 0x1p-11f), 1.0f);
  EXPECT_EQ(fp32_round_to_tf32_ref(1.0f + 0x3p-11f), 1.0f + 0x1p-9f);
  EXPECT_EQ(bits_of(fp32_round_to_tf32_ref(from_bits(0x7f7fffff))), 0x7f7fe000u);
  EXPECT_EQ(fp32_round_to_tf32_ref(INFINITY), INFINITY);
  EXPECT_TRUE(std::isnan(fp32_round_to_tf32_ref(from_bits(0x7f800001))));
}

TEST(FloatConvertRef, HandKnownFp8) {
  EXPECT_EQ(fp32_to_e4m3_ref(1.0f), 0x38);
  EXPECT_EQ(fp32_to_e4m3_ref(448.0f), 0x7e);
  EXPECT_EQ(fp32_to_e4m3_ref(464.0f), 0x7e);  // tie between 448 and (NaN-coded) 480 -> 448
  EXPECT_EQ(fp32_to_e4m3_ref(1e6f), 0x7e);
  EXPECT_EQ(fp32_to_e4m3_ref(INFINITY), 0x7e);  // no inf in E4M3: saturates
  EXPECT_EQ(fp32_to_e4m3_ref(-INFINITY), 0xfe);
  EXPECT_EQ(fp32_to_e4m3_ref(NAN), 0x7f);
  EXPECT_EQ(fp32_to_e4m3_ref(-NAN), 0xff);
  EXPECT_EQ(fp32_to_e4m3_ref(0x1p-9f), 0x01);   // smallest subnormal
  EXPECT_EQ(fp32_to_e4m3_ref(0x1p-10f), 0x00);  // tie -> even
  EXPECT_EQ(fp32_to_e4m3_ref(0x1.8p-10f), 0x01);
  EXPECT_EQ(fp32_to_e4m3_ref(0x1p-6f), 0x08);  // smallest normal
  EXPECT_EQ(fp32_to_e4m3_ref(-0.0f), 0x80);
  EXPECT_EQ(e4m3_to_fp32_ref(0x7e), 448.0f);
  EXPECT_EQ(e4m3_to_fp32_ref(0x01), 0x1p-9f);
  EXPECT_TRUE(std::isnan(e4m3_to_fp32_ref(0x7f)));
  EXPECT_EQ(fp32_to_e5m2_ref(1.0f), 0x3c);
  EXPECT_EQ(fp32_to_e5m2_ref(57344.0f), 0x7b);
  EXPECT_EQ(fp32_to_e5m2_ref(61440.0f), 0x7b);  // tie rounds up past max: saturates
  EXPECT_EQ(fp32_to_e5m2_ref(1e9f), 0x7b);
  EXPECT_EQ(fp32_to_e5m2_ref(INFINITY), 0x7c);
  EXPECT_EQ(fp32_to_e5m2_ref(-INFINITY), 0xfc);
  EXPECT_EQ(fp32_to_e5m2_ref(NAN), 0x7e);
  EXPECT_EQ(fp32_to_e5m2_ref(0x1p-16f), 0x01);
  EXPECT_EQ(fp32_to_e5m2_ref(0x1p-17f), 0x00);
  EXPECT_EQ(fp32_to_e5m2_ref(0x1p-14f), 0x04);
  EXPECT_EQ(e5m2_to_fp32_ref(0x7c), INFINITY);
}

// Decodes a 1-E-M IEEE-like pattern from first principles (only called for finite codes).
double decode_formula(uint32_t c, int e_bits, int m_bits) {
  const int bias = (1 << (e_bits - 1)) - 1;
  const uint32_t e = (c >> m_bits) & ((1u << e_bits) - 1), m = c & ((1u << m_bits) - 1);
  const double mag = e == 0 ? std::ldexp(m, 1 - bias - m_bits)
                            : std::ldexp(m + (1u << m_bits), static_cast<int>(e) - bias - m_bits);
  return (c >> (e_bits + m_bits)) & 1u ? -mag : mag;
}

struct Format16 {
  const char* name;
  uint16_t (*encode)(float);
  float (*decode)(uint16_t);
  void (*to_fp32)(const uint16_t*, float*, int64_t);
  int e_bits, m_bits;
};
const Format16 FORMATS16[] = {
    {"fp16", fp32_to_fp16_ref, fp16_to_fp32_ref, convert_fp16_to_fp32, 5, 10},
    {"bf16", fp32_to_bf16_ref, bf16_to_fp32_ref, convert_bf16_to_fp32, 8, 7}};

TEST(FloatConvertRef, ExhaustiveDecode16) {
  for (const Format16& f : FORMATS16) {
    SCOPED_TRACE(f.name);
    const uint32_t exp_ones = ((1u << f.e_bits) - 1) << f.m_bits, man = (1u << f.m_bits) - 1;
    for (uint32_t c = 0; c < 65536; ++c) {
      const float x = f.decode(static_cast<uint16_t>(c));
      const uint32_t mag = c & 0x7fff;
      const bool neg = (c & 0x8000) != 0;
      if (mag > exp_ones) {  // NaN: quiet NaN with the payload shifted up (bf16: the exact shift)
        const uint32_t want = (neg ? 0x80000000u : 0u) | 0x7f800000u |
                              ((mag & man) << (23 - f.m_bits)) | (f.e_bits == 5 ? 0x00400000u : 0u);
        ASSERT_EQ(bits_of(x), want) << c;
        ASSERT_EQ(f.encode(x), c | (1u << (f.m_bits - 1))) << c;  // re-encodes quieted
      } else if (mag == exp_ones) {
        ASSERT_EQ(x, neg ? -INFINITY : INFINITY) << c;
        ASSERT_EQ(f.encode(x), c) << c;
      } else {
        ASSERT_EQ(static_cast<double>(x), decode_formula(c, f.e_bits, f.m_bits)) << c;
        ASSERT_EQ(std::signbit(x), neg) << c;
        ASSERT_EQ(f.encode(x), c) << c;  // exact round trip
      }
    }
  }
}

TEST(FloatConvertRef, ExhaustiveDecodeFp8) {
  for (uint32_t c = 0; c < 256; ++c) {
    const float x4 = e4m3_to_fp32_ref(static_cast<uint8_t>(c));
    if ((c & 0x7f) == 0x7f) {
      EXPECT_TRUE(std::isnan(x4)) << c;
      EXPECT_EQ(fp32_to_e4m3_ref(x4), c) << c;
    } else {
      EXPECT_EQ(static_cast<double>(x4), decode_formula(c, 4, 3)) << c;
      EXPECT_EQ(fp32_to_e4m3_ref(x4), c) << c;
    }
    const float x5 = e5m2_to_fp32_ref(static_cast<uint8_t>(c));
    if ((c & 0x7f) > 0x7c) {
      EXPECT_TRUE(std::isnan(x5)) << c;
      EXPECT_EQ(fp32_to_e5m2_ref(x5), c | 0x02) << c;  // quiet bit set
    } else if ((c & 0x7f) == 0x7c) {
      EXPECT_EQ(x5, c & 0x80 ? -INFINITY : INFINITY);
      EXPECT_EQ(fp32_to_e5m2_ref(x5), c);
    } else {
      EXPECT_EQ(static_cast<double>(x5), decode_formula(c, 5, 2)) << c;
      EXPECT_EQ(fp32_to_e5m2_ref(x5), c) << c;
    }
  }
}

// The _ref encoders against the nearest-value oracle on millions of finite inputs.
TEST(FloatConvertRef, EncodersMatchNearestOracle) {
  std::vector<float> in = awkward_floats(1 << 20, 7);
  const std::vector<float> sweep = fp32_sweep(1021);  // 4.2M patterns
  in.insert(in.end(), sweep.begin(), sweep.end());
  const auto fp16 = oracle_for(0x7bff, [](uint32_t c) { return decode_formula(c, 5, 10); });
  const auto bf16 = oracle_for(0x7f7f, [](uint32_t c) { return decode_formula(c, 8, 7); });
  const auto e4m3 = oracle_for(0x7e, [](uint32_t c) { return decode_formula(c, 4, 3); });
  const auto e5m2 = oracle_for(0x7b, [](uint32_t c) { return decode_formula(c, 5, 2); });
  int64_t bad = 0;
  for (float x : in) {
    if (!std::isfinite(x)) continue;
    const bool ok =
        fp32_to_fp16_ref(x) == fp16.encode(x, 15) && fp32_to_bf16_ref(x) == bf16.encode(x, 15) &&
        fp32_to_e4m3_ref(x) == e4m3.encode(x, 7) && fp32_to_e5m2_ref(x) == e5m2.encode(x, 7);
    if (!ok && ++bad <= 3) ADD_FAILURE() << "input bits 0x" << std::hex << bits_of(x);
  }
  EXPECT_EQ(bad, 0);
}

class FloatConvertVector : public ::testing::TestWithParam<CpuIsa> {};

TEST_P(FloatConvertVector, MatchesRefBitExact) {
  IsaCap cap(GetParam());
  std::vector<float> in = awkward_floats(1000003, 11);
  const std::vector<float> sweep = fp32_sweep(4093);  // 1M patterns
  in.insert(in.end(), sweep.begin(), sweep.end());
  const auto n_all = static_cast<int64_t>(in.size());
  std::vector<uint16_t> all16(65536);
  for (uint32_t c = 0; c < 65536; ++c) all16[c] = static_cast<uint16_t>(c);
  std::vector<uint8_t> all8(4096);
  for (size_t i = 0; i < all8.size(); ++i) all8[i] = static_cast<uint8_t>(i * 37 + i / 256);

  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{15}, int64_t{17}, int64_t{63}, int64_t{65},
                    int64_t{1000003}, n_all - 1}) {
    SCOPED_TRACE("n = " + std::to_string(n));
    const int64_t off = n < n_all ? 1 : 0;  // an unaligned start
    EXPECT_EQ(
        (count_mismatches<float, uint16_t>(in, off, n, convert_fp32_to_fp16, fp32_to_fp16_ref)), 0);
    EXPECT_EQ(
        (count_mismatches<float, uint16_t>(in, off, n, convert_fp32_to_bf16, fp32_to_bf16_ref)), 0);
    for (float inv : {1.0f, 0.0371f, 1024.0f}) {
      SCOPED_TRACE("inv_scale = " + std::to_string(inv));
      auto e4 = [inv](const float* x, uint8_t* y, int64_t m) {
        convert_fp32_to_e4m3(x, y, m, inv);
      };
      auto e5 = [inv](const float* x, uint8_t* y, int64_t m) {
        convert_fp32_to_e5m2(x, y, m, inv);
      };
      EXPECT_EQ((count_mismatches<float, uint8_t>(
                    in, off, n, e4, [inv](float x) { return fp32_to_e4m3_ref(x * inv); })),
                0);
      EXPECT_EQ((count_mismatches<float, uint8_t>(
                    in, off, n, e5, [inv](float x) { return fp32_to_e5m2_ref(x * inv); })),
                0);
    }
  }
  // Decoders: every 16-bit pattern; FP8 patterns repeated with awkward lengths and scales.
  EXPECT_EQ(
      (count_mismatches<uint16_t, float>(all16, 0, 65536, convert_fp16_to_fp32,
                                         [](uint16_t h) { return bits_of(fp16_to_fp32_ref(h)); })),
      0);
  EXPECT_EQ(
      (count_mismatches<uint16_t, float>(all16, 0, 65536, convert_bf16_to_fp32,
                                         [](uint16_t h) { return bits_of(bf16_to_fp32_ref(h)); })),
      0);
  EXPECT_EQ(
      (count_mismatches<uint16_t, float>(all16, 3, 17, convert_fp16_to_fp32,
                                         [](uint16_t h) { return bits_of(fp16_to_fp32_ref(h)); })),
      0);
  for (int64_t n : {int64_t{1}, int64_t{15}, int64_t{17}, int64_t{65}, int64_t{4095}}) {
    for (float s : {1.0f, 0.125f, 3.7e-3f, 1e30f}) {
      auto d4 = [s](const uint8_t* x, float* y, int64_t m) { convert_e4m3_to_fp32(x, y, m, s); };
      auto d5 = [s](const uint8_t* x, float* y, int64_t m) { convert_e5m2_to_fp32(x, y, m, s); };
      EXPECT_EQ((count_mismatches<uint8_t, float>(
                    all8, 1, n, d4, [s](uint8_t v) { return bits_of(e4m3_to_fp32_ref(v) * s); })),
                0);
      EXPECT_EQ((count_mismatches<uint8_t, float>(
                    all8, 1, n, d5, [s](uint8_t v) { return bits_of(e5m2_to_fp32_ref(v) * s); })),
                0);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(IsaLevels, FloatConvertVector, ::testing::ValuesIn(isa_levels()),
                         [](const ::testing::TestParamInfo<CpuIsa>& info) {
                           std::string name = cpu_isa_name(info.param);
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace qsync
