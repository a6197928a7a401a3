// File: kernels/ref/float_convert_ref.cpp
// The scalar reference conversions between FP32 and FP16, BF16, FP8 E4M3, FP8 E5M2 and TF32:
// the oracles the vectorized converters (cpu/float_convert_cpu.cpp) are tested against.
//
// They are written for clarity, not speed: the narrowing conversions round in double
// arithmetic (every float is exact in a double, scaling by a power of two is exact, and
// std::nearbyint rounds to nearest even under the default rounding mode) rather than with
// the bit tricks of the vectorized code, so the two are independent implementations.
//
// Rules shared by every format:
//   * round to nearest, ties to even; subnormals on both sides are exact/correctly rounded;
//   * a finite value past the largest finite value saturates to +-max_finite;
//   * +-inf stays inf in FP16, BF16, E5M2, TF32 and saturates to +-448 in E4M3 (no inf);
//   * NaN encodes to a quiet NaN of the same sign that keeps the top payload bits
//     (sign | all-ones exponent | quiet bit | truncated payload), which is what the F16C
//     instruction VCVTPS2PH produces; E4M3 has a single NaN per sign, S.1111.111;
//   * NaN decodes to a quiet NaN (quiet bit set, payload shifted up), which is what
//     VCVTPH2PS produces. BF16 decoding is the exact bit shift b << 16 for every pattern.
#include <bit>
#include <cmath>
#include <cstdint>

#include "kernels/float_convert.h"

namespace qsync {
namespace {

// A narrow binary float: 1 sign bit, exp_bits, man_bits; bias 2^(exp_bits-1) - 1.
struct NarrowFormat {
  int exp_bits;
  int man_bits;
  uint32_t max_code;  // magnitude bits of the largest finite value
  bool has_inf;       // IEEE-like: all-ones exponent is inf (mantissa 0) or NaN
};

constexpr NarrowFormat FP16_FORMAT{5, 10, 0x7bff, true};
constexpr NarrowFormat BF16_FORMAT{8, 7, 0x7f7f, true};
constexpr NarrowFormat E4M3_FORMAT{4, 3, 0x7e, false};  // 0x7f is NaN: max is 1.75 * 2^8 = 448
constexpr NarrowFormat E5M2_FORMAT{5, 2, 0x7b, true};   // 1.75 * 2^15 = 57344

int bias_of(const NarrowFormat& f) { return (1 << (f.exp_bits - 1)) - 1; }
uint32_t exp_all_ones(const NarrowFormat& f) { return ((1u << f.exp_bits) - 1) << f.man_bits; }
uint32_t man_mask(const NarrowFormat& f) { return (1u << f.man_bits) - 1; }

uint32_t nan_code(const NarrowFormat& f, uint32_t fp32_bits) {
  if (!f.has_inf) return exp_all_ones(f) | man_mask(f);  // E4M3: the one NaN
  const uint32_t quiet = 1u << (f.man_bits - 1);
  const uint32_t payload = (fp32_bits >> (23 - f.man_bits)) & man_mask(f);
  return exp_all_ones(f) | quiet | payload;
}

uint32_t encode_narrow(const NarrowFormat& f, float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint32_t sign = (u >> 31) << (f.exp_bits + f.man_bits);
  if (std::isnan(x)) return sign | nan_code(f, u);
  if (std::isinf(x)) return sign | (f.has_inf ? exp_all_ones(f) : f.max_code);

  const int bias = bias_of(f);
  const int emin = 1 - bias;  // exponent of the smallest normal
  const double a = std::fabs(static_cast<double>(x));
  uint64_t code = 0;
  if (a < std::ldexp(1.0, emin)) {
    // Subnormal range: count units of 2^(emin - man_bits). Rounding up to 2^man_bits gives
    // exactly the code of the smallest normal, so no special case is needed.
    code = static_cast<uint64_t>(std::nearbyint(std::ldexp(a, f.man_bits - emin)));
  } else {
    int e = 0;
    const double m = std::frexp(a, &e);                        // a = m * 2^e, m in [0.5, 1)
    e -= 1;                                                    // a = (2m) * 2^e, 2m in [1, 2)
    double q = std::nearbyint(std::ldexp(m, f.man_bits + 1));  // in [2^M, 2^(M+1)]
    if (q == std::ldexp(1.0, f.man_bits + 1)) {  // the mantissa rounded up into the next binade
      q = std::ldexp(1.0, f.man_bits);
      e += 1;
    }
    const uint64_t biased = static_cast<uint64_t>(e + bias);
    code = (biased << f.man_bits) | (static_cast<uint64_t>(q) - (1ull << f.man_bits));
  }
  if (code > f.max_code) code = f.max_code;  // finite overflow saturates
  return sign | static_cast<uint32_t>(code);
}

float decode_narrow(const NarrowFormat& f, uint32_t v) {
  const uint32_t sign = (v >> (f.exp_bits + f.man_bits)) & 1u;
  const uint32_t exp = (v >> f.man_bits) & ((1u << f.exp_bits) - 1);
  const uint32_t man = v & man_mask(f);
  const bool all_ones = exp == (1u << f.exp_bits) - 1;
  const bool is_nan = f.has_inf ? (all_ones && man != 0) : (all_ones && man == man_mask(f));
  if (is_nan) {
    const uint32_t bits = (sign << 31) | 0x7fc00000u | (man << (23 - f.man_bits));
    return std::bit_cast<float>(bits);
  }
  if (f.has_inf && all_ones) return sign ? -INFINITY : INFINITY;
  const int bias = bias_of(f);
  const float mag = exp == 0 ? std::ldexp(static_cast<float>(man), 1 - bias - f.man_bits)
                             : std::ldexp(static_cast<float>(man | (1u << f.man_bits)),
                                          static_cast<int>(exp) - bias - f.man_bits);
  return sign ? -mag : mag;
}

}  // namespace

uint16_t fp32_to_fp16_ref(float x) { return static_cast<uint16_t>(encode_narrow(FP16_FORMAT, x)); }
float fp16_to_fp32_ref(uint16_t h) { return decode_narrow(FP16_FORMAT, h); }

uint16_t fp32_to_bf16_ref(float x) { return static_cast<uint16_t>(encode_narrow(BF16_FORMAT, x)); }
float bf16_to_fp32_ref(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

uint8_t fp32_to_e4m3_ref(float x) { return static_cast<uint8_t>(encode_narrow(E4M3_FORMAT, x)); }
float e4m3_to_fp32_ref(uint8_t v) { return decode_narrow(E4M3_FORMAT, v); }

uint8_t fp32_to_e5m2_ref(float x) { return static_cast<uint8_t>(encode_narrow(E5M2_FORMAT, x)); }
float e5m2_to_fp32_ref(uint8_t v) { return decode_narrow(E5M2_FORMAT, v); }

// TF32 is FP32 with the low 13 mantissa bits zeroed: same exponent range, so subnormals round
// with the same integer arithmetic as normals. NaN stays a quiet NaN (the payload left in the
// low bits alone would otherwise be truncated into inf).
float fp32_round_to_tf32_ref(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint32_t mag = u & 0x7fffffffu;
  if (mag > 0x7f800000u) return std::bit_cast<float>((u & ~0x1fffu) | 0x00400000u);
  if (mag == 0x7f800000u) return x;
  uint32_t r = mag + 0xfffu + ((mag >> 13) & 1u);  // round to nearest, ties to even
  r &= ~0x1fffu;
  if (r >= 0x7f800000u) r = 0x7f7fe000u;  // finite overflow saturates to max TF32
  return std::bit_cast<float>((u & 0x80000000u) | r);
}

}  // namespace qsync
