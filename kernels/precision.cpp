// File: kernels/precision.cpp
// The precision traits table: one row per Precision, designated-initializer style.
#include "kernels/precision.h"

#include <bit>
#include <cmath>
#include <stdexcept>

#include "kernels/float_convert.h"

namespace qsync {
namespace {

uint32_t encode_fp32(float x) { return std::bit_cast<uint32_t>(x); }
float decode_fp32(uint32_t b) { return std::bit_cast<float>(b); }
uint32_t encode_tf32(float x) { return std::bit_cast<uint32_t>(fp32_round_to_tf32_ref(x)); }
uint32_t encode_bf16(float x) { return fp32_to_bf16_ref(x); }
float decode_bf16(uint32_t b) { return bf16_to_fp32_ref(uint16_t(b)); }
uint32_t encode_fp16(float x) { return fp32_to_fp16_ref(x); }
float decode_fp16(uint32_t b) { return fp16_to_fp32_ref(uint16_t(b)); }
uint32_t encode_e4m3(float x) { return fp32_to_e4m3_ref(x); }
float decode_e4m3(uint32_t b) { return e4m3_to_fp32_ref(uint8_t(b)); }
uint32_t encode_e5m2(float x) { return fp32_to_e5m2_ref(x); }
float decode_e5m2(uint32_t b) { return e5m2_to_fp32_ref(uint8_t(b)); }
uint32_t encode_int8(float x) {
  if (std::isnan(x)) return 0;
  float r = std::nearbyint(x);
  r = r > 127.f ? 127.f : (r < -127.f ? -127.f : r);
  return uint32_t(uint8_t(int8_t(r)));
}
float decode_int8(uint32_t b) { return float(int8_t(uint8_t(b))); }

constexpr auto FP = NumberKind::FLOATING_POINT;
const std::array<PrecisionTraits, PRECISION_COUNT> TABLE = {{
    // precision            name        bytes kind exp man max_finite      inf    encode       decode       cuda sm
    {Precision::FP32,     "fp32",     4, FP, 8, 23, 3.40282347e38f, true,  encode_fp32, decode_fp32, 0},
    {Precision::TF32,     "tf32",     4, FP, 8, 10, 3.40116213e38f, true,  encode_tf32, decode_fp32, 80},
    {Precision::BF16,     "bf16",     2, FP, 8, 7,  3.38953139e38f, true,  encode_bf16, decode_bf16, 80},
    {Precision::FP16,     "fp16",     2, FP, 5, 10, 65504.0f,       true,  encode_fp16, decode_fp16, 70},
    {Precision::INT8,     "int8",     1, NumberKind::FIXED_POINT, 0, 7, 127.0f, false, encode_int8, decode_int8, 75},
    {Precision::FP8_E4M3, "fp8-e4m3", 1, FP, 4, 3,  448.0f,         false, encode_e4m3, decode_e4m3, 89},
    {Precision::FP8_E5M2, "fp8-e5m2", 1, FP, 5, 2,  57344.0f,       true,  encode_e5m2, decode_e5m2, 89},
}};

}  // namespace

const std::array<PrecisionTraits, PRECISION_COUNT>& precision_table() { return TABLE; }

const PrecisionTraits& precision_traits(Precision p) {
  const auto i = static_cast<size_t>(p);
  if (i >= TABLE.size()) throw std::invalid_argument("precision_traits: precision id out of range");
  return TABLE[i];
}

std::string precision_names_joined() {
  std::string s;
  for (const auto& t : TABLE) {
    if (!s.empty()) s += ", ";
    s += t.name;
  }
  return s;
}

Precision precision_from_name(std::string_view name) {
  for (const auto& t : TABLE)
    if (name == t.name) return t.precision;
  throw std::invalid_argument("unknown precision '" + std::string(name) +
                              "'; known precisions: " + precision_names_joined());
}

}  // namespace qsync
