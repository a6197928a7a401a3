// File: kernels/cpu/conv_int8_output.cpp
// The INT8 convolutions' output transforms (conv_int8_output.h): NHWC sums to NCHW outputs in
// tiles of 8 positions x 8 channels transposed in registers (AVX2, the host baseline x86-64-v3),
// with a fused ReLU and its mask when asked; tails, in-place planes and builds without AVX2 in
// scalar code.
#include "kernels/cpu/conv_int8_output.h"

#include <algorithm>

#ifdef __AVX2__
#include <immintrin.h>
#endif

namespace qsync {
namespace {

#ifdef __AVX2__
// Eight rows of eight floats transposed in registers: r[j] becomes column j.
inline void transpose_8x8(__m256 r[8]) {
  __m256 t[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  __m256 u[8];
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
    r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
  }
}

// The ReLU of eight outputs (a max with zero: NaN and -0 to +0, as the scalar `v > 0 ? v : 0`),
// and their mask bytes (1 where the result is > 0) when `mask` is set.
inline __m256 relu_8(__m256 v, uint8_t* mask) {
  v = _mm256_max_ps(v, _mm256_setzero_ps());
  if (mask != nullptr) {
    const __m256i on = _mm256_srli_epi32(_mm256_castps_si256(_mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_GT_OQ)), 31);
    const __m128i words = _mm_packs_epi32(_mm256_castsi256_si128(on), _mm256_extracti128_si256(on, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(mask), _mm_packus_epi16(words, words));
  }
  return v;
}

#endif

// One output value the scalar way: the transform, the ReLU and its mask byte.
inline float output_one(float sum, float scale, float bias, const Int8Output& t, uint8_t* mask) {
  float v = sum * scale + bias;
  if (!t.relu) return v;
  v = v > 0.0f ? v : 0.0f;
  if (mask != nullptr) *mask = v > 0.0f ? 1 : 0;
  return v;
}

}  // namespace

// out (N, C, H, W) from sums (N, H, W, C): the transform in one pass, in tiles of positions whose
// C sums stay in L1; 8 positions x 8 channels at a time through a register transpose (one
// multiply and one add per value, as the scalar tails: the same bits).
void int8_nhwc_to_nchw(const float* sums, const Int8Output& t, float* out) {
  constexpr int64_t TILE = 64;
  const int64_t tiles = (t.hw + TILE - 1) / TILE, ch = t.channels;
#pragma omp parallel for schedule(static) if (t.n * t.hw * ch > (1 << 16))
  for (int64_t i = 0; i < t.n * tiles; ++i) {
    const int64_t b = i / tiles, p0 = (i % tiles) * TILE, p1 = std::min(t.hw, p0 + TILE);
    const float* src = sums + b * t.hw * ch;
    float* dst = out + b * ch * t.hw;
    uint8_t* mask = t.relu_mask != nullptr ? t.relu_mask + b * ch * t.hw : nullptr;  // (C, H*W) of sample b
    int64_t c0 = 0;
#ifdef __AVX2__
    for (; c0 + 8 <= ch; c0 += 8) {
      __m256 scale[8], bias[8];
      for (int j = 0; j < 8; ++j) {
        scale[j] = _mm256_set1_ps(t.channel_scale(c0 + j));
        bias[j] = _mm256_set1_ps(t.bias != nullptr ? t.bias[c0 + j] : 0.0f);
      }
      int64_t p = p0;
      for (; p + 8 <= p1; p += 8) {
        __m256 r[8];
        for (int j = 0; j < 8; ++j) r[j] = _mm256_loadu_ps(src + (p + j) * ch + c0);
        transpose_8x8(r);
        for (int j = 0; j < 8; ++j) {
          const int64_t at = (c0 + j) * t.hw + p;
          __m256 v = _mm256_add_ps(_mm256_mul_ps(r[j], scale[j]), bias[j]);
          if (t.relu) v = relu_8(v, mask != nullptr ? mask + at : nullptr);
          _mm256_storeu_ps(dst + at, v);
        }
      }
      for (int64_t c = c0; c < c0 + 8; ++c) {
        const float sc = t.channel_scale(c), bc = t.bias != nullptr ? t.bias[c] : 0.0f;
        for (int64_t q = p; q < p1; ++q)
          dst[c * t.hw + q] = output_one(src[q * ch + c], sc, bc, t, mask != nullptr ? mask + c * t.hw + q : nullptr);
      }
    }
#endif
    for (int64_t c = c0; c < ch; ++c) {
      const float sc = t.channel_scale(c), bc = t.bias != nullptr ? t.bias[c] : 0.0f;
      for (int64_t q = p0; q < p1; ++q)
        dst[c * t.hw + q] = output_one(src[q * ch + c], sc, bc, t, mask != nullptr ? mask + c * t.hw + q : nullptr);
    }
  }
}

// out (N, C, H, W) holding sums: the transform in place, per plane.
void int8_scale_in_place(const Int8Output& t, float* out) {
#pragma omp parallel for schedule(static) if (t.n * t.channels * t.hw > (1 << 16))
  for (int64_t nc = 0; nc < t.n * t.channels; ++nc) {
    float* row = out + nc * t.hw;
    const int64_t c = nc % t.channels;
    const float scale = t.channel_scale(c), bias = t.bias != nullptr ? t.bias[c] : 0.0f;
    uint8_t* mask = t.relu_mask != nullptr ? t.relu_mask + nc * t.hw : nullptr;
    if (!t.relu) {
      for (int64_t i = 0; i < t.hw; ++i) row[i] = row[i] * scale + bias;
      continue;
    }
    for (int64_t i = 0; i < t.hw; ++i) row[i] = output_one(row[i], scale, bias, t, mask != nullptr ? mask + i : nullptr);
  }
}

}  // namespace qsync
