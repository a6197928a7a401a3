// File: kernels/cpu/float_convert_cpu.cpp
// The buffer converters of float_convert.h, vectorized with runtime dispatch on
// cpu_isa_active(): AVX-512 (>= CpuIsa::AVX512; FP32 -> BF16 natively from AVX512_BF16), AVX2 +
// F16C (CpuIsa::AVX2), else the scalar _ref loop. Every path is bit-identical to the _ref functions (NaN, inf, subnormals and
// saturation included); tests/kernels/float_convert_test.cpp checks that.
//
//   FP16: F16C (VCVTPS2PH, round to nearest even) after clamping finite |x| > 65504 to
//         +-65504, since the instruction itself overflows to inf. Its NaN result (quiet,
//         truncated payload) is the rule the reference follows.
//   BF16: integer round-to-nearest-even on the FP32 bits. Where the CPU has AVX512_BF16,
//         VCVTNEPS2BF16 converts 16 at once; it rounds the same way but treats FP32 subnormal
//         inputs as zero and rounds finite values past the largest BF16 to inf, so the (rare)
//         vectors holding a subnormal or such a value redo those lanes the integer way.
//   FP8:  branch-free integer encode/decode written as plain C++ (variable shifts and
//         selects) in loops the compiler vectorizes under the function's target attribute.
//         The scaled forms compute x * inv_scale (one FP32 multiply, as the scalar path) before
//         encoding and decode(v) * scale after decoding.
//
// Large buffers (n >= 2^16) are split into fixed chunks run by an OpenMP parallel for; each
// element's result depends on that element only, so the thread count never changes a bit.
// The dispatch and chunking are simd_dispatch.h's; the BF16 vector encoders bf16_encode_simd.h's.
#include <algorithm>
#include <bit>
#include <cstdint>

#include "kernels/cpu/bf16_encode_simd.h"
#include "kernels/float_convert.h"

namespace qsync {
namespace {

using simd::active_path;
using simd::for_chunks;
using simd::Path;
using simd::tail_mask16;
using simd::FP32_INF_BITS;

// ---- branch-free FP8 codecs (same results as the _ref functions) -------------------------

// All ones when c holds, else zero: a select written as arithmetic.
__attribute__((always_inline)) inline uint32_t mask_if(bool c) {
  return 0u - static_cast<uint32_t>(c);
}

// Encodes x into a 1-E-M float; MAX_CODE is the magnitude of the largest finite value.
template <int E, int M, uint32_t MAX_CODE, bool HAS_INF>
__attribute__((always_inline)) inline uint32_t encode_bits(float x) {
  constexpr int BIAS = (1 << (E - 1)) - 1;
  constexpr int SHIFT = 23 - M;                                    // mantissa bits dropped
  constexpr uint32_t MIN_NORMAL = uint32_t(127 - BIAS + 1) << 23;  // FP32 bits of 2^(1-BIAS)
  constexpr uint32_t REBIAS = uint32_t(127 - BIAS) << M;
  constexpr uint32_t ALL_ONES = ((1u << E) - 1) << M;
  constexpr uint32_t MAN_MASK = (1u << M) - 1;
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint32_t a = u & 0x7fffffffu;
  const uint32_t sign = (u >> 31) << (E + M);
  // Normal result: round the FP32 bits at SHIFT (ties to even), then rebias the exponent.
  const uint32_t rn = ((a + ((1u << (SHIFT - 1)) - 1) + ((a >> SHIFT) & 1u)) >> SHIFT) - REBIAS;
  // Subnormal result: shift the full significand right so it counts units of 2^(1-BIAS-M).
  int32_t s = (151 - BIAS - M) - static_cast<int32_t>(a >> 23);
  s = s < 1 ? 1 : (s > 31 ? 31 : s);
  const uint32_t m = (a & 0x7fffffu) | 0x800000u;
  const uint32_t rs = (m + ((1u << (s - 1)) - 1) + ((m >> s) & 1u)) >> s;
  uint32_t r = a < MIN_NORMAL ? rs : rn;
  r = r > MAX_CODE ? MAX_CODE : r;  // finite overflow (and inf without an inf code) saturates
  if constexpr (HAS_INF) r = a == 0x7f800000u ? ALL_ONES : r;
  const uint32_t nan =
      HAS_INF ? (ALL_ONES | (1u << (M - 1)) | ((a >> SHIFT) & MAN_MASK)) : (ALL_ONES | MAN_MASK);
  r = a > 0x7f800000u ? nan : r;
  return sign | r;
}

template <int E, int M, bool HAS_INF>
__attribute__((always_inline)) inline float decode_bits(uint32_t v) {
  constexpr int BIAS = (1 << (E - 1)) - 1;
  constexpr uint32_t MAN_MASK = (1u << M) - 1;
  constexpr uint32_t EXP_MAX = (1u << E) - 1;
  const uint32_t mag = v & ((1u << (E + M)) - 1);
  const uint32_t sign = ((v >> (E + M)) & 1u) << 31;
  const uint32_t exp = mag >> M;
  const uint32_t man = mag & MAN_MASK;
  const uint32_t normal = (mag << (23 - M)) + (uint32_t(127 - BIAS) << 23);
  // Subnormal man * 2^(1-BIAS-M): convert man exactly to FP32, then lower its exponent field
  // by BIAS+M-1 with integer arithmetic (the result is a normal FP32; no FP multiply).
  const uint32_t man_f = std::bit_cast<uint32_t>(static_cast<float>(static_cast<int32_t>(man)));
  const uint32_t sub = man_f - (man == 0 ? 0u : uint32_t(BIAS + M - 1) << 23);
  // The selects below are mask arithmetic (all-ones / zero words) rather than ?: chains, which
  // GCC turns into branches by jump threading and then refuses to vectorize.
  const uint32_t is_sub = mask_if(exp == 0);
  const uint32_t is_special = mask_if(exp == EXP_MAX);
  const uint32_t nan_man = HAS_INF ? mask_if(man != 0) : mask_if(man == MAN_MASK);
  const uint32_t is_nan = is_special & nan_man;
  const uint32_t is_inf = HAS_INF ? (is_special & ~nan_man) : 0u;
  const uint32_t nan = 0x7fc00000u | (man << (23 - M));
  uint32_t bits = (sub & is_sub) | (normal & ~is_sub);
  bits = (bits & ~is_inf) | (0x7f800000u & is_inf);
  bits = (bits & ~is_nan) | (nan & is_nan);
  return std::bit_cast<float>(sign | bits);
}

constexpr auto encode_e4m3 = encode_bits<4, 3, 0x7e, false>;
constexpr auto encode_e5m2 = encode_bits<5, 2, 0x7b, true>;
constexpr auto decode_e4m3 = decode_bits<4, 3, false>;
constexpr auto decode_e5m2 = decode_bits<5, 2, true>;

template <uint32_t (*ENCODE)(float)>
QSYNC_TARGET_AVX2 void encode_fp8_avx2(const float* x, uint8_t* y, int64_t n, float inv_scale) {
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<uint8_t>(ENCODE(x[i] * inv_scale));
}
template <uint32_t (*ENCODE)(float)>
QSYNC_TARGET_AVX512 void encode_fp8_avx512(const float* x, uint8_t* y, int64_t n, float inv_scale) {
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<uint8_t>(ENCODE(x[i] * inv_scale));
}
template <float (*DECODE)(uint32_t)>
QSYNC_TARGET_AVX2 void decode_fp8_avx2(const uint8_t* x, float* y, int64_t n, float scale) {
  for (int64_t i = 0; i < n; ++i) y[i] = DECODE(x[i]) * scale;
}
template <float (*DECODE)(uint32_t)>
QSYNC_TARGET_AVX512 void decode_fp8_avx512(const uint8_t* x, float* y, int64_t n, float scale) {
  for (int64_t i = 0; i < n; ++i) y[i] = DECODE(x[i]) * scale;
}

// ---- FP16 ---------------------------------------------------------------------------------

constexpr int FP16_MAX_BITS = 0x477fe000;  // 65504.0f
constexpr int CVT_RNE = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

QSYNC_TARGET_AVX512 void fp32_to_fp16_avx512(const float* x, uint16_t* y, int64_t n) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
  const __m512i max_bits = _mm512_set1_epi32(FP16_MAX_BITS);
  const __m512i inf_bits = _mm512_set1_epi32(FP32_INF_BITS);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = tail_mask16(n - i);
    const __m512i u = _mm512_maskz_loadu_epi32(k, x + i);
    const __m512i a = _mm512_and_si512(u, abs_mask);
    const __mmask16 over =
        _mm512_cmpgt_epi32_mask(a, max_bits) & _mm512_cmplt_epi32_mask(a, inf_bits);
    const __m512i sat =
        _mm512_or_si512(_mm512_andnot_si512(abs_mask, u), max_bits);  // sign | 65504
    const __m512i clamped = _mm512_mask_mov_epi32(u, over, sat);
    const __m256i h = _mm512_cvtps_ph(_mm512_castsi512_ps(clamped), CVT_RNE);
    _mm256_mask_storeu_epi16(y + i, k, h);
  }
}

QSYNC_TARGET_AVX512 void fp16_to_fp32_avx512(const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = tail_mask16(n - i);
    const __m256i h = _mm256_maskz_loadu_epi16(k, x + i);
    _mm512_mask_storeu_ps(y + i, k, _mm512_cvtph_ps(h));
  }
}

QSYNC_TARGET_AVX2 __m128i fp32_to_fp16_avx2_block(__m256i u) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i max_bits = _mm256_set1_epi32(FP16_MAX_BITS);
  const __m256i a = _mm256_and_si256(u, abs_mask);
  const __m256i over = _mm256_andnot_si256(
      _mm256_cmpgt_epi32(a, _mm256_set1_epi32(FP32_INF_BITS - 1)), _mm256_cmpgt_epi32(a, max_bits));
  const __m256i sat = _mm256_or_si256(_mm256_andnot_si256(abs_mask, u), max_bits);
  const __m256i clamped = _mm256_blendv_epi8(u, sat, over);
  return _mm256_cvtps_ph(_mm256_castsi256_ps(clamped), CVT_RNE);
}

QSYNC_TARGET_AVX2 void fp32_to_fp16_avx2(const float* x, uint16_t* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), fp32_to_fp16_avx2_block(u));
  }
  if (i < n) {  // tail through a zero-padded block
    alignas(32) float in[8] = {};
    alignas(16) uint16_t out[8];
    std::copy(x + i, x + n, in);
    _mm_store_si128(
        reinterpret_cast<__m128i*>(out),
        fp32_to_fp16_avx2_block(_mm256_load_si256(reinterpret_cast<const __m256i*>(in))));
    std::copy(out, out + (n - i), y + i);
  }
}

QSYNC_TARGET_AVX2 void fp16_to_fp32_avx2(const uint16_t* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i));
    _mm256_storeu_ps(y + i, _mm256_cvtph_ps(h));
  }
  if (i < n) {
    alignas(16) uint16_t in[8] = {};
    alignas(32) float out[8];
    std::copy(x + i, x + n, in);
    _mm256_store_ps(out, _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(in))));
    std::copy(out, out + (n - i), y + i);
  }
}

// ---- BF16 ---------------------------------------------------------------------------------

QSYNC_TARGET_AVX512 void fp32_to_bf16_avx512(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = tail_mask16(n - i);
    const __m512i r = simd::bf16_bits_avx512(_mm512_maskz_loadu_epi32(k, x + i));
    _mm256_mask_storeu_epi16(y + i, k, _mm512_cvtepi32_epi16(r));
  }
}

// VCVTNEPS2BF16 and its fix-ups (bf16_encode_simd.h): the same bits as fp32_to_bf16_avx512.
QSYNC_TARGET_AVX512_BF16 void fp32_to_bf16_avx512_bf16(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = tail_mask16(n - i);
    _mm256_mask_storeu_epi16(y + i, k, simd::bf16_encode_avx512_bf16(_mm512_maskz_loadu_ps(k, x + i)));
  }
}

QSYNC_TARGET_AVX512 void bf16_to_fp32_avx512(const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = tail_mask16(n - i);
    const __m512i b = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, x + i));
    _mm512_mask_storeu_epi32(y + i, k, _mm512_slli_epi32(b, 16));
  }
}

QSYNC_TARGET_AVX2 void fp32_to_bf16_avx2(const float* x, uint16_t* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), simd::bf16_encode_avx2(u));
  }
  if (i < n) {
    alignas(32) float in[8] = {};
    alignas(16) uint16_t out[8];
    std::copy(x + i, x + n, in);
    _mm_store_si128(
        reinterpret_cast<__m128i*>(out),
        simd::bf16_encode_avx2(_mm256_load_si256(reinterpret_cast<const __m256i*>(in))));
    std::copy(out, out + (n - i), y + i);
  }
}

QSYNC_TARGET_AVX2 void bf16_to_fp32_avx2(const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::bit_cast<float>(uint32_t{x[i]} << 16);
}

// ---- dispatch -----------------------------------------------------------------------------

// The scalar paths: the _ref functions, elementwise (scaled: x * inv_scale, decode(v) * scale).
template <auto REF, class In, class Out>
void ref_loop(const In* x, Out* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = REF(x[i]);
}
template <auto REF>
void ref_encode_scaled(const float* x, uint8_t* y, int64_t n, float inv_scale) {
  for (int64_t i = 0; i < n; ++i) y[i] = REF(x[i] * inv_scale);
}
template <auto REF>
void ref_decode_scaled(const uint8_t* x, float* y, int64_t n, float scale) {
  for (int64_t i = 0; i < n; ++i) y[i] = REF(x[i]) * scale;
}

// Runs the active path's kernel over [0, n), in parallel chunks when n is large.
template <class In, class Out, class... Extra>
void run(const In* x, Out* y, int64_t n, void (*avx512)(const In*, Out*, int64_t, Extra...),
         void (*avx2)(const In*, Out*, int64_t, Extra...),
         void (*scalar)(const In*, Out*, int64_t, Extra...), Extra... extra) {
  const Path p = active_path();
  const auto kernel = p == Path::AVX512 ? avx512 : p == Path::AVX2 ? avx2 : scalar;
  for_chunks(n, [&](int64_t b, int64_t c) { kernel(x + b, y + b, c, extra...); });
}

}  // namespace

void convert_fp32_to_fp16(const float* x, uint16_t* y, int64_t n) {
  run(x, y, n, fp32_to_fp16_avx512, fp32_to_fp16_avx2, ref_loop<fp32_to_fp16_ref, float, uint16_t>);
}

void convert_fp16_to_fp32(const uint16_t* x, float* y, int64_t n) {
  run(x, y, n, fp16_to_fp32_avx512, fp16_to_fp32_avx2, ref_loop<fp16_to_fp32_ref, uint16_t, float>);
}

void convert_fp32_to_bf16(const float* x, uint16_t* y, int64_t n) {
  const bool native = cpu_isa_active() >= CpuIsa::AVX512_BF16;
  run(x, y, n, native ? fp32_to_bf16_avx512_bf16 : fp32_to_bf16_avx512, fp32_to_bf16_avx2,
      ref_loop<fp32_to_bf16_ref, float, uint16_t>);
}

void convert_bf16_to_fp32(const uint16_t* x, float* y, int64_t n) {
  run(x, y, n, bf16_to_fp32_avx512, bf16_to_fp32_avx2, ref_loop<bf16_to_fp32_ref, uint16_t, float>);
}

void convert_fp32_to_e4m3(const float* x, uint8_t* y, int64_t n, float inv_scale) {
  run(x, y, n, encode_fp8_avx512<encode_e4m3>, encode_fp8_avx2<encode_e4m3>,
      ref_encode_scaled<fp32_to_e4m3_ref>, inv_scale);
}

void convert_e4m3_to_fp32(const uint8_t* x, float* y, int64_t n, float scale) {
  run(x, y, n, decode_fp8_avx512<decode_e4m3>, decode_fp8_avx2<decode_e4m3>,
      ref_decode_scaled<e4m3_to_fp32_ref>, scale);
}

void convert_fp32_to_e5m2(const float* x, uint8_t* y, int64_t n, float inv_scale) {
  run(x, y, n, encode_fp8_avx512<encode_e5m2>, encode_fp8_avx2<encode_e5m2>,
      ref_encode_scaled<fp32_to_e5m2_ref>, inv_scale);
}

void convert_e5m2_to_fp32(const uint8_t* x, float* y, int64_t n, float scale) {
  run(x, y, n, decode_fp8_avx512<decode_e5m2>, decode_fp8_avx2<decode_e5m2>,
      ref_decode_scaled<e5m2_to_fp32_ref>, scale);
}

}  // namespace qsync
