// File: kernels/cpu/conv_int8_output.cpp
// The INT8 convolutions' output transforms (conv_int8_output.h): NHWC sums to NCHW outputs in
// tiles of 8 positions x 8 channels transposed in registers (AVX2, the host baseline x86-64-v3),
// tails, in-place planes and builds without AVX2 in scalar code.
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

#endif

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
        for (int j = 0; j < 8; ++j)
          _mm256_storeu_ps(dst + (c0 + j) * t.hw + p, _mm256_add_ps(_mm256_mul_ps(r[j], scale[j]), bias[j]));
      }
      for (int64_t c = c0; c < c0 + 8; ++c) {
        const float sc = t.channel_scale(c), bc = t.bias != nullptr ? t.bias[c] : 0.0f;
        for (int64_t q = p; q < p1; ++q) dst[c * t.hw + q] = src[q * ch + c] * sc + bc;
      }
    }
#endif
    for (int64_t c = c0; c < ch; ++c) {
      const float sc = t.channel_scale(c), bc = t.bias != nullptr ? t.bias[c] : 0.0f;
      for (int64_t q = p0; q < p1; ++q) dst[c * t.hw + q] = src[q * ch + c] * sc + bc;
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
    for (int64_t i = 0; i < t.hw; ++i) row[i] = row[i] * scale + bias;
  }
}

}  // namespace qsync
