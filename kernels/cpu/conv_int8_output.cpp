// File: kernels/cpu/conv_int8_output.cpp
// The INT8 convolutions' output transforms (conv_int8_output.h): NHWC sums to NCHW outputs in
// tiles of 8 positions x 8 channels transposed in registers (AVX2, the host baseline x86-64-v3),
// with a fused ReLU and its mask when asked, or with a 2x2 max pooling after them (eight channels
// at a time in the NHWC sums, before their transpose); tails, in-place planes and builds without
// AVX2 in scalar code.
#include "kernels/cpu/conv_int8_output.h"

#include <algorithm>
#include <cstring>
#include <vector>

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

// A max pooling window's next cell, in row-major order: taken when larger, or NaN over a number.
inline void pool_take(float v, int32_t index, float& best, int32_t& best_index) {
  const bool better = v > best || (v != v && best == best);
  best = better ? v : best;
  best_index = better ? index : best_index;
}

// Channel c of one sample, the scalar way: src the sample's sums (H, W, C); dst (C, Ho, Wo),
// arg and mask the sample's (or nullptr).
void pooled_channel(const float* src, const Int8Output& t, int64_t c, float* dst, int32_t* arg, uint8_t* mask) {
  const int64_t ch = t.channels, W = t.width, Ho = t.hw / W / 2, Wo = W / 2;
  const float sc = t.channel_scale(c), bc = t.bias != nullptr ? t.bias[c] : 0.0f;
  if (mask != nullptr)
    for (int64_t p = 0; p < t.hw; ++p) output_one(src[p * ch + c], sc, bc, t, mask + c * t.hw + p);
  for (int64_t oh = 0; oh < Ho; ++oh)
    for (int64_t ow = 0; ow < Wo; ++ow) {
      const int64_t p = 2 * oh * W + 2 * ow;
      float best = output_one(src[p * ch + c], sc, bc, t, nullptr);
      int32_t best_index = int32_t(p);
      for (const int64_t q : {p + 1, p + W, p + W + 1})
        pool_take(output_one(src[q * ch + c], sc, bc, t, nullptr), int32_t(q), best, best_index);
      dst[(c * Ho + oh) * Wo + ow] = best;
      if (arg != nullptr) arg[(c * Ho + oh) * Wo + ow] = best_index;
    }
}

#ifdef __AVX2__
// pool_take on eight lanes; `rectified`: no lane is NaN (a ReLU's outputs), so larger decides.
template <bool rectified>
inline void pool_take_8(__m256 v, __m256i index, __m256& best, __m256i& best_index) {
  __m256 better = _mm256_cmp_ps(v, best, _CMP_GT_OQ);
  if (!rectified)
    better = _mm256_or_ps(better,
                          _mm256_and_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q), _mm256_cmp_ps(best, best, _CMP_ORD_Q)));
  best = _mm256_blendv_ps(best, v, better);
  best_index = _mm256_castps_si256(
      _mm256_blendv_ps(_mm256_castsi256_ps(best_index), _mm256_castsi256_ps(index), better));
}

// The first n (< 8) lanes of v to dst: four, two and one at a time.
inline void store_first_lanes(float* dst, __m256 v, int64_t n) {
  __m128 part = _mm256_castps256_ps128(v);
  if (n & 4) {
    _mm_storeu_ps(dst, part);
    part = _mm256_extractf128_ps(v, 1);
    dst += 4;
  }
  if (n & 2) {
    _mm_storel_pi(reinterpret_cast<__m64*>(dst), part);
    part = _mm_movehl_ps(part, part);
    dst += 2;
  }
  if (n & 1) _mm_store_ss(dst, part);
}

// The groups of eight positions that cover [0, count), count >= 8: from 0 in steps of 8, the last
// one moved back to end at count (overlapping the one before: the same values written again).
inline int64_t next_group(int64_t i, int64_t count) { return i + 8 >= count ? count : std::min(i + 8, count - 8); }

// Stores `count` positions of eight channels (rows (count, 8) at `lanes`) as the channels' runs:
// dst[j * ld + i] = lanes[i * 8 + j], eight positions at a time through the register transpose.
void store_channel_runs(const float* lanes, int64_t count, float* dst, int64_t ld) {
  if (count < 8) {
    __m256 r[8];
    for (int64_t j = 0; j < 8; ++j) r[j] = j < count ? _mm256_loadu_ps(lanes + j * 8) : _mm256_setzero_ps();
    transpose_8x8(r);
    for (int j = 0; j < 8; ++j) store_first_lanes(dst + j * ld, r[j], count);
    return;
  }
  for (int64_t i = 0; i < count; i = next_group(i, count)) {
    __m256 r[8];
    for (int j = 0; j < 8; ++j) r[j] = _mm256_loadu_ps(lanes + (i + j) * 8);
    transpose_8x8(r);
    for (int j = 0; j < 8; ++j) _mm256_storeu_ps(dst + j * ld + i, r[j]);
  }
}

// The mask bytes of `count` positions of eight channels (rows (count, 8) at `lanes`, rectified):
// mask[j * ld + i] = lanes[i * 8 + j] > 0, as relu_8 writes them. Eight positions' comparisons
// make one word whose byte i holds position i's eight channel bits: bit j of every byte, shifted
// down and masked, is channel j's eight mask bytes.
void store_channel_masks(const float* lanes, int64_t count, uint8_t* mask, int64_t ld) {
  constexpr uint64_t LOW_BITS = 0x0101010101010101ull;
  auto bits_of = [&](int64_t i, int64_t n) {
    uint64_t bits = 0;
    for (int64_t k = 0; k < n; ++k) {
      const __m256 positive = _mm256_cmp_ps(_mm256_loadu_ps(lanes + (i + k) * 8), _mm256_setzero_ps(), _CMP_GT_OQ);
      bits |= uint64_t(_mm256_movemask_ps(positive)) << (8 * k);
    }
    return bits;
  };
  if (count < 8) {
    const uint64_t bits = bits_of(0, count);
    for (int j = 0; j < 8; ++j)
      for (int64_t k = 0; k < count; ++k) mask[j * ld + k] = uint8_t((bits >> (8 * k + j)) & 1);
    return;
  }
  for (int64_t i = 0; i < count; i = next_group(i, count)) {
    const uint64_t bits = bits_of(i, 8);
    for (int j = 0; j < 8; ++j) {
      const uint64_t bytes = (bits >> j) & LOW_BITS;
      std::memcpy(mask + j * ld + i, &bytes, 8);
    }
  }
}

// Channels c0 .. c0 + 7 of one sample (src its sums (H, W, C); dst, arg, mask the sample's):
// each input row's outputs computed with a channel per lane (the same multiply and add as the
// transposed path) into a row buffer, their mask bytes written, and at every second row the
// windows pooled against the row before, the pooled row transposed out. (Taking a row's groups
// one after another instead, its sums in L1 across them, measured slower: 32 planes written at
// once rather than 8.)
template <bool rectified>
void pooled_group_avx2(const float* src, const Int8Output& t, int64_t c0, float* dst, int32_t* arg, uint8_t* mask) {
  const int64_t ch = t.channels, W = t.width, H = t.hw / W, Ho = H / 2, Wo = W / 2;
  alignas(32) float scale_lanes[8], bias_lanes[8];
  for (int j = 0; j < 8; ++j) {
    scale_lanes[j] = t.channel_scale(c0 + j);
    bias_lanes[j] = t.bias != nullptr ? t.bias[c0 + j] : 0.0f;
  }
  const __m256 scale = _mm256_load_ps(scale_lanes), bias = _mm256_load_ps(bias_lanes);
  thread_local std::vector<float> lanes;  // rows (2, W, 8) of outputs; pooled maxima, indices (Wo, 8)
  lanes.resize(size_t(2 * W * 8 + 2 * Wo * 8));
  float* const best_at = lanes.data() + 2 * W * 8;
  float* const index_at = best_at + Wo * 8;  // int32 bits
  for (int64_t h = 0; h < H; ++h) {
    float* row = lanes.data() + (h & 1) * W * 8;
    const float* in = src + h * W * ch + c0;
    for (int64_t w = 0; w < W; ++w) {
      __m256 v = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(in + w * ch), scale), bias);
      if (rectified) v = _mm256_max_ps(v, _mm256_setzero_ps());
      _mm256_storeu_ps(row + w * 8, v);
    }
    if (rectified && mask != nullptr) store_channel_masks(row, W, mask + c0 * t.hw + h * W, t.hw);
    if ((h & 1) == 0 || h / 2 >= Ho) continue;
    const float* r0 = lanes.data();  // row h - 1
    const int64_t oh = h / 2;
    // The window's four cells' indices in the plane, advanced by two columns a window.
    __m256i at = _mm256_set1_epi32(int32_t(2 * oh * W));
    const __m256i one = _mm256_set1_epi32(1), down = _mm256_set1_epi32(int32_t(W)), two = _mm256_set1_epi32(2);
    for (int64_t ow = 0; ow < Wo; ++ow, at = _mm256_add_epi32(at, two)) {
      const __m256i below = _mm256_add_epi32(at, down);
      __m256 best = _mm256_loadu_ps(r0 + 2 * ow * 8);
      __m256i best_index = at;
      pool_take_8<rectified>(_mm256_loadu_ps(r0 + (2 * ow + 1) * 8), _mm256_add_epi32(at, one), best, best_index);
      pool_take_8<rectified>(_mm256_loadu_ps(row + 2 * ow * 8), below, best, best_index);
      pool_take_8<rectified>(_mm256_loadu_ps(row + (2 * ow + 1) * 8), _mm256_add_epi32(below, one), best, best_index);
      _mm256_storeu_ps(best_at + ow * 8, best);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(index_at + ow * 8), best_index);
    }
    store_channel_runs(best_at, Wo, dst + (c0 * Ho + oh) * Wo, Ho * Wo);
    if (arg != nullptr)  // the indices' bits through the same float transpose
      store_channel_runs(index_at, Wo, reinterpret_cast<float*>(arg) + (c0 * Ho + oh) * Wo, Ho * Wo);
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

// out (N, C, H/2, W/2) from sums (N, H, W, C): per sample and group of eight channels (the
// channels past the last full group, and every channel without AVX2, the scalar way).
void int8_nhwc_to_nchw_pooled(const float* sums, const Int8Output& t, float* out) {
  const int64_t ch = t.channels, groups = (ch + 7) / 8, pooled = (t.hw / t.width / 2) * (t.width / 2);
#pragma omp parallel for schedule(static) if (t.n * t.hw * ch > (1 << 16))
  for (int64_t i = 0; i < t.n * groups; ++i) {
    const int64_t b = i / groups, c0 = (i % groups) * 8;
    const float* src = sums + b * t.hw * ch;
    float* dst = out + b * ch * pooled;
    int32_t* arg = t.argmax != nullptr ? t.argmax + b * ch * pooled : nullptr;
    uint8_t* mask = t.relu_mask != nullptr ? t.relu_mask + b * ch * t.hw : nullptr;
#ifdef __AVX2__
    if (c0 + 8 <= ch) {
      (t.relu ? pooled_group_avx2<true> : pooled_group_avx2<false>)(src, t, c0, dst, arg, mask);
      continue;
    }
#endif
    for (int64_t c = c0; c < std::min(ch, c0 + 8); ++c) pooled_channel(src, t, c, dst, arg, mask);
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
