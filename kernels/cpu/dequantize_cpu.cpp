// File: kernels/cpu/dequantize_cpu.cpp
// The way back from INT8 (quantize.h): dequantize_int8 (q * scale in FP32) and
// dequantize_int8_to_bf16 (the BF16 bits of q * scale in the same pass, where the two-step way
// writes and rereads an FP32 copy), with runtime dispatch on cpu_isa_active() (simd_dispatch.h):
// AVX-512 (BF16 through VCVTNEPS2BF16 where the CPU has AVX512_BF16), AVX2, else the _ref loops.
// Bit-identical to the _ref functions: one FP32 multiply per element, then the BF16 rounding of
// bf16_encode_simd.h. Buffers of n >= 2^16 run in fixed parallel chunks (each element depends on
// itself only, so the thread count never changes a bit).
#include <cstdint>

#include "kernels/cpu/bf16_encode_simd.h"
#include "kernels/quantize.h"

namespace qsync {
namespace {

using simd::for_chunks;
using simd::Path;
using simd::tail_mask16;

// q[i] * scale for the 16 lanes of k (loads nothing past them).
QSYNC_TARGET_AVX512 inline __m512 dequantize16_avx512(const int8_t* q, __mmask16 k, __m512 scale) {
  return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(k, q))), scale);
}

QSYNC_TARGET_AVX2 inline __m256 dequantize8_avx2(const int8_t* q, __m256 scale) {
  const __m256i v = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q)));
  return _mm256_mul_ps(_mm256_cvtepi32_ps(v), scale);
}

QSYNC_TARGET_AVX512 void dequantize_avx512(const int8_t* q, float* x, int64_t n, float scale) {
  const __m512 vs = _mm512_set1_ps(scale);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = tail_mask16(n - i);
    _mm512_mask_storeu_ps(x + i, k, dequantize16_avx512(q + i, k, vs));
  }
}

QSYNC_TARGET_AVX2 void dequantize_avx2(const int8_t* q, float* x, int64_t n, float scale) {
  const __m256 vs = _mm256_set1_ps(scale);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, dequantize8_avx2(q + i, vs));
  dequantize_int8_ref(q + i, x + i, n - i, scale);  // the same single multiply per element
}

QSYNC_TARGET_AVX512_BF16 void dequantize_to_bf16_avx512_bf16(const int8_t* q, uint16_t* y, int64_t n, float scale) {
  const __m512 vs = _mm512_set1_ps(scale);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)  // whole vectors: plain stores
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i),
                        simd::bf16_encode_avx512_bf16(dequantize16_avx512(q + i, 0xffff, vs)));
  if (i < n) {
    const __mmask16 k = tail_mask16(n - i);
    _mm256_mask_storeu_epi16(y + i, k, simd::bf16_encode_avx512_bf16(dequantize16_avx512(q + i, k, vs)));
  }
}

QSYNC_TARGET_AVX512 void dequantize_to_bf16_avx512(const int8_t* q, uint16_t* y, int64_t n, float scale) {
  const __m512 vs = _mm512_set1_ps(scale);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = tail_mask16(n - i);
    const __m512i bits = simd::bf16_bits_avx512(_mm512_castps_si512(dequantize16_avx512(q + i, k, vs)));
    _mm256_mask_storeu_epi16(y + i, k, _mm512_cvtepi32_epi16(bits));
  }
}

QSYNC_TARGET_AVX2 void dequantize_to_bf16_avx2(const int8_t* q, uint16_t* y, int64_t n, float scale) {
  const __m256 vs = _mm256_set1_ps(scale);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i),
                     simd::bf16_encode_avx2(_mm256_castps_si256(dequantize8_avx2(q + i, vs))));
  dequantize_int8_to_bf16_ref(q + i, y + i, n - i, scale);
}

}  // namespace

void dequantize_int8(const int8_t* q, float* x, int64_t n, float scale) {
  const Path p = simd::active_path();
  if (p == Path::SCALAR) return dequantize_int8_ref(q, x, n, scale);
  for_chunks(n, [&](int64_t b, int64_t c) {
    if (p == Path::AVX512)
      dequantize_avx512(q + b, x + b, c, scale);
    else
      dequantize_avx2(q + b, x + b, c, scale);
  });
}

void dequantize_int8_to_bf16(const int8_t* q, uint16_t* y, int64_t n, float scale) {
  const Path p = simd::active_path();
  if (p == Path::SCALAR) return dequantize_int8_to_bf16_ref(q, y, n, scale);
  const bool native = cpu_isa_active() >= CpuIsa::AVX512_BF16;
  for_chunks(n, [&](int64_t b, int64_t c) {
    if (p == Path::AVX512 && native)
      dequantize_to_bf16_avx512_bf16(q + b, y + b, c, scale);
    else if (p == Path::AVX512)
      dequantize_to_bf16_avx512(q + b, y + b, c, scale);
    else
      dequantize_to_bf16_avx2(q + b, y + b, c, scale);
  });
}

}  // namespace qsync
