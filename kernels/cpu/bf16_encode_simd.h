// File: kernels/cpu/bf16_encode_simd.h
// FP32 -> BF16 on one vector (internal to kernels/cpu): the same bits as fp32_to_bf16_ref
// (round to nearest even on the FP32 bits, finite overflow saturated to the largest BF16, inf
// kept, NaN quieted) on each ISA path, for the loops that convert (float_convert_cpu.cpp) and the
// ones that produce BF16 from something else in the same pass (dequantize_cpu.cpp).
//   bf16_bits_avx512      integer arithmetic, 16 lanes (BF16 bits in the low half of each lane)
//   bf16_encode_avx512_bf16  VCVTNEPS2BF16, which rounds the same way but reads FP32 subnormals as
//                         zero and rounds finite values past the largest BF16 to inf: vectors
//                         holding such a value (rare) redo those lanes the integer way
//   bf16_encode_avx2      integer arithmetic, 8 lanes
#pragma once

#include "kernels/cpu/simd_dispatch.h"

namespace qsync::simd {

constexpr int FP32_INF_BITS = 0x7f800000;

QSYNC_TARGET_AVX512 inline __m512i bf16_bits_avx512(__m512i u) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
  const __m512i inf_bits = _mm512_set1_epi32(FP32_INF_BITS);
  const __m512i a = _mm512_and_si512(u, abs_mask);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(a, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(a, _mm512_set1_epi32(0x7fff)), lsb), 16);
  r = _mm512_min_epu32(r, _mm512_set1_epi32(0x7f7f));  // finite overflow saturates
  r = _mm512_mask_mov_epi32(r, _mm512_cmpeq_epi32_mask(a, inf_bits), _mm512_set1_epi32(0x7f80));
  const __m512i nan = _mm512_or_si512(_mm512_srli_epi32(a, 16), _mm512_set1_epi32(0x40));
  r = _mm512_mask_mov_epi32(r, _mm512_cmpgt_epi32_mask(a, inf_bits), nan);
  return _mm512_or_si512(r, _mm512_srli_epi32(_mm512_andnot_si512(abs_mask, u), 16));
}

QSYNC_TARGET_AVX512_BF16 inline __m256i bf16_encode_avx512_bf16(__m512 v) {
  __m256i r = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v));
  const __m512i u = _mm512_castps_si512(v);
  const __m512i a = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
  // Unsigned range tests: 0 < |x| < 2^-126 (a subnormal) and largest-finite-BF16 < |x| < inf.
  const __mmask16 subnormal = _mm512_cmplt_epu32_mask(_mm512_sub_epi32(a, _mm512_set1_epi32(1)),
                                                      _mm512_set1_epi32(0x007fffff));
  const __mmask16 overflow = _mm512_cmplt_epu32_mask(_mm512_sub_epi32(a, _mm512_set1_epi32(0x7f7f8000)),
                                                     _mm512_set1_epi32(FP32_INF_BITS - 0x7f7f8000));
  const __mmask16 redo = subnormal | overflow;
  if (redo != 0) r = _mm256_mask_mov_epi16(r, redo, _mm512_cvtepi32_epi16(bf16_bits_avx512(u)));
  return r;
}

QSYNC_TARGET_AVX2 inline __m128i bf16_encode_avx2(__m256i u) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i inf_bits = _mm256_set1_epi32(FP32_INF_BITS);
  const __m256i a = _mm256_and_si256(u, abs_mask);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(a, 16), _mm256_set1_epi32(1));
  __m256i r =
      _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(a, _mm256_set1_epi32(0x7fff)), lsb), 16);
  r = _mm256_min_epu32(r, _mm256_set1_epi32(0x7f7f));
  r = _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7f80), _mm256_cmpeq_epi32(a, inf_bits));
  const __m256i nan = _mm256_or_si256(_mm256_srli_epi32(a, 16), _mm256_set1_epi32(0x40));
  r = _mm256_blendv_epi8(r, nan, _mm256_cmpgt_epi32(a, inf_bits));
  r = _mm256_or_si256(r, _mm256_srli_epi32(_mm256_andnot_si256(abs_mask, u), 16));
  // Values fit in 16 bits: pack the two 128-bit halves (unsigned saturation never triggers).
  return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

}  // namespace qsync::simd
