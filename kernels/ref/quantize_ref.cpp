// File: kernels/ref/quantize_ref.cpp
// The scalar references of quantize.h (the oracles of cpu/quantize_cpu.cpp), the scale
// helpers, and the stochastic-rounding noise shared by the CPU and CUDA quantizers.
//
// Quantization arithmetic, identical in every implementation (ref, AVX2, AVX-512, CUDA):
//   inv = 1.0f / scale                                  (one FP32 division per tensor / row)
//   NEAREST_EVEN: y = round_to_nearest_even(x * inv)    (FP32 multiply, then exact RNE)
//   STOCHASTIC:   y = floor(fmaf(x, inv, u))            (one fused multiply-add, single rounding)
//                 u = stochastic_uniform(seed, i), i the element's flat index
//   q = NaN(y) ? 0 : clamp(y, -127, 127)
// Multiplying by the reciprocal (not dividing) can move x / scale by one ulp, which only
// matters at exact .5 ties; the bound |x - q * scale| <= scale / 2 holds up to that ulp.
// The fused multiply-add is explicit so that no compiler's contraction choice can change a bit
// (the vectorized code uses FMA instructions; CUDA uses __fmaf_rn).
#include <cmath>
#include <cstdint>

#include "kernels/float_convert.h"
#include "kernels/quantize.h"

namespace qsync {
namespace {

float abs_max_scan(const float* x, int64_t n) {
  float m = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    if (a > m) m = a;  // false for NaN: NaN is ignored
  }
  return m;
}

int8_t quantize_one(float x, float inv, Rounding r, uint64_t seed, uint64_t index) {
  const float y = r == Rounding::NEAREST_EVEN
                      ? std::nearbyint(x * inv)  // default mode: RNE
                      : std::floor(std::fma(x, inv, stochastic_uniform(seed, index)));
  if (std::isnan(y)) return 0;
  if (y > 127.0f) return 127;
  if (y < -127.0f) return -127;
  return static_cast<int8_t>(y);
}

void quantize_span(const float* x, int8_t* q, int64_t n, float scale, Rounding r, uint64_t seed,
                   uint64_t first_index) {
  const float inv = 1.0f / scale;
  for (int64_t i = 0; i < n; ++i)
    q[i] = quantize_one(x[i], inv, r, seed, first_index + static_cast<uint64_t>(i));
}

// The splitmix64 finalizer (Steele, Lea, Flood 2014; the mixing function of
// java.util.SplittableRandom): a bijection on 64-bit words with full avalanche.
uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// lowbias32 (C. Wellons' "hash prospector", 2018): a bijection on 32-bit words, among the
// lowest-bias (best avalanche) integer hashes of two multiplies found by its search.
uint32_t lowbias32(uint32_t x) {
  x = (x ^ (x >> 16)) * 0x7feb352du;
  x = (x ^ (x >> 15)) * 0x846ca68bu;
  return x ^ (x >> 16);
}

}  // namespace

float amax_ref(const float* x, int64_t n) { return abs_max_scan(x, n); }

void amax_rows_ref(const float* x, int64_t rows, int64_t cols, float* out) {
  for (int64_t r = 0; r < rows; ++r) out[r] = abs_max_scan(x + r * cols, cols);
}

float int8_scale_from_amax(float amax) { return amax == 0.0f ? 1.0f : amax / 127.0f; }

// u(seed, i) is one 16-bit half of a 32-bit hash of the element pair j = i / 2, keyed by the
// tensor's mix64(seed): each hash serves two consecutive elements.
//   key   = mix64(seed)                                  (64 bits, once per tensor)
//   state = uint32(key) + uint32(j + 1) * 0x9e3779b9     (mod 2^32; the golden-ratio Weyl step)
//   z     = lowbias32(state ^ uint32(key >> 32))
//   bits  = (z >> (16 * (i % 2))) & 0xffff              (element 2j + k: bits 16k .. 16k + 15)
//   u     = bits * 2^-16                                 (exact in FP32; u in [0, 1 - 2^-16])
// 16 bits of noise keep the rounding unbiased to within 2^-16 of one quantization step (a value
// below 2^-16 steps from the grid point under it always rounds down). The hash, the cost of
// stochastic rounding, is 32-bit so that AVX2 computes it natively (eight lanes, two multiplies;
// it has no 64-bit multiply) and shared by two elements. j + 1 wraps at 2^32: within one tensor
// the noise repeats after 2^33 elements (34 GB of FP32), beyond any tensor we cast.
// Pure unsigned integer arithmetic (wrapping multiply, add, xor, shift) until the last step, so
// any language or device reproduces it bit for bit. Golden values are in quantize_test.cpp.
float stochastic_uniform(uint64_t seed, uint64_t index) {
  const uint64_t key = mix64(seed);
  const uint32_t state = static_cast<uint32_t>(key) + static_cast<uint32_t>(index / 2 + 1) * 0x9e3779b9u;
  const uint32_t z = lowbias32(state ^ static_cast<uint32_t>(key >> 32));
  return static_cast<float>((z >> (16 * (index % 2))) & 0xffffu) * 0x1p-16f;
}

void quantize_int8_ref(const float* x, int8_t* q, int64_t n, float scale, Rounding r,
                       uint64_t seed) {
  quantize_span(x, q, n, scale, r, seed, 0);
}

float amax_masked_ref(const float* x, const uint8_t* mask, int64_t n) {
  float m = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float a = std::fabs(mask[i] != 0 ? x[i] : 0.0f);
    if (a > m) m = a;  // false for NaN: NaN is ignored
  }
  return m;
}

void quantize_int8_masked_ref(const float* x, const uint8_t* mask, int8_t* q, int64_t n, float scale, Rounding r,
                              uint64_t seed) {
  const float inv = 1.0f / scale;
  for (int64_t i = 0; i < n; ++i) q[i] = quantize_one(mask[i] != 0 ? x[i] : 0.0f, inv, r, seed, uint64_t(i));
}

// Row r uses scales[r]; the stochastic index is the flat index r * cols + c.
void quantize_int8_rows_ref(const float* x, int8_t* q, int64_t rows, int64_t cols,
                            const float* scales, Rounding r, uint64_t seed) {
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t off = row * cols;
    quantize_span(x + off, q + off, cols, scales[row], r, seed, static_cast<uint64_t>(off));
  }
}

void dequantize_int8_ref(const int8_t* q, float* x, int64_t n, float scale) {
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(q[i]) * scale;
}

void dequantize_int8_to_bf16_ref(const int8_t* q, uint16_t* y, int64_t n, float scale) {
  for (int64_t i = 0; i < n; ++i) y[i] = fp32_to_bf16_ref(static_cast<float>(q[i]) * scale);
}

// scale = amax / max_finite: amax lands on the format's largest finite value (no headroom
// margin). 1 when amax is 0, like the INT8 scale.
float fp8_scale_from_amax(float amax, float format_max_finite) {
  return amax == 0.0f ? 1.0f : amax / format_max_finite;
}

}  // namespace qsync
