// File: kernels/cpu/quantize_cpu.cpp
// The vectorized quantize.h entry points (amax, amax_rows, amax_masked, quantize_int8,
// quantize_int8_masked, quantize_int8_rows; dequantize_cpu.cpp has the way back) with runtime
// dispatch on cpu_isa_active() (simd_dispatch.h): AVX-512 (>= CpuIsa::AVX512), AVX2 + FMA
// (CpuIsa::AVX2), else the _ref functions. Bit-identical to the _ref functions:
// the arithmetic is the one spelled out at the top of ref/quantize_ref.cpp (x * (1/scale) then
// RNE; or floor(fma(x, 1/scale, u)); NaN -> 0; clamp to [-127, 127]), and the stochastic noise
// is the same lowbias32 hash of a Weyl sequence, computed in 32-bit integer lanes: one hash per
// pair of elements (16 bits each, the even element's from the low end), so the vector loops start
// on an even index (an odd first element is quantized alone).
//
// Buffers of n >= 2^16 elements are split into fixed chunks run by an OpenMP parallel for.
// Each quantized element depends only on its own value and flat index, and amax is a max
// (exact in any order), so the thread count never changes a bit.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/simd_dispatch.h"
#include "kernels/quantize.h"

namespace qsync {
namespace {

using simd::active_path;
using simd::for_chunks;
using simd::Path;
using simd::tail_mask16;
using simd::CHUNK_ELEMENTS;
using simd::PARALLEL_MIN_ELEMENTS;

constexpr uint32_t WEYL_STEP = 0x9e3779b9u;
constexpr uint32_t HASH_MUL_1 = 0x7feb352du;
constexpr uint32_t HASH_MUL_2 = 0x846ca68bu;

uint64_t mix64(uint64_t z) {  // the splitmix64 finalizer, as in ref/quantize_ref.cpp
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The noise of a tensor (ref/quantize_ref.cpp): the Weyl states of the element pairs j = pair ..
// pair + lanes - 1, uint32(key) + (j + 1) * step, and the word each is xored with before hashing.
struct NoiseStates {
  alignas(64) uint32_t state[16];
  uint32_t key_hi;
  NoiseStates(uint64_t seed, uint64_t pair, int lanes) {
    const uint64_t key = mix64(seed);
    for (int l = 0; l < lanes; ++l)
      state[l] = static_cast<uint32_t>(key) + static_cast<uint32_t>(pair + static_cast<uint64_t>(l) + 1) * WEYL_STEP;
    key_hi = static_cast<uint32_t>(key >> 32);
  }
};

// One element the reference's way (ref/quantize_ref.cpp): the lead-in of a span whose first
// index is odd.
int8_t quantize_stochastic_one(float x, float inv, uint64_t seed, uint64_t index) {
  const float y = std::floor(std::fma(x, inv, stochastic_uniform(seed, index)));
  if (std::isnan(y)) return 0;
  return static_cast<int8_t>(std::min(std::max(y, -127.0f), 127.0f));
}

// ---- AVX-512 ------------------------------------------------------------------------------

QSYNC_TARGET_AVX512 inline __m512i lowbias32_avx512(__m512i x) {
  x = _mm512_mullo_epi32(_mm512_xor_si512(x, _mm512_srli_epi32(x, 16)), _mm512_set1_epi32(int(HASH_MUL_1)));
  x = _mm512_mullo_epi32(_mm512_xor_si512(x, _mm512_srli_epi32(x, 15)), _mm512_set1_epi32(int(HASH_MUL_2)));
  return _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
}

// u for 32 consecutive elements from the states of their 16 pairs: the hashes' 16-bit words in
// index order (element 2j + k takes bits 16k .. 16k + 15 of hash j), elements 0-15 in lo.
QSYNC_TARGET_AVX512 inline void noise_avx512(__m512i s, __m512i key_hi, __m512& lo, __m512& hi) {
  const __m512i z = lowbias32_avx512(_mm512_xor_si512(s, key_hi));
  const __m512 unit = _mm512_set1_ps(0x1p-16f);
  lo = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(z))), unit);
  hi = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(z, 1))), unit);
}

// NaN -> 0, clamp to [-127, 127], convert (exact) and store the masked lanes as int8.
QSYNC_TARGET_AVX512 inline void store_q_avx512(int8_t* q, __mmask16 k, __m512 y) {
  y = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(y, y, _CMP_ORD_Q), y);
  y = _mm512_min_ps(_mm512_max_ps(y, _mm512_set1_ps(-127.0f)), _mm512_set1_ps(127.0f));
  _mm512_mask_cvtsepi32_storeu_epi8(q, k, _mm512_cvtps_epi32(y));
}

// The lanes of k whose mask byte is set (all of k without a mask): a masked-out lane loads as +0.
QSYNC_TARGET_AVX512 inline __mmask16 lanes_on(__mmask16 k, const uint8_t* mask) {
  if (mask == nullptr) return k;
  const __m512i m = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(k, mask));
  return _mm512_test_epi32_mask(m, m);
}

// x[0, n) (where mask, if any, is set; +0 elsewhere) quantized; `first` is x[0]'s flat index.
QSYNC_TARGET_AVX512 void quantize_avx512(const float* x, const uint8_t* mask, int8_t* q, int64_t n, float inv,
                                         Rounding r, uint64_t seed, uint64_t first) {
  const __m512 vinv = _mm512_set1_ps(inv);
  if (r == Rounding::NEAREST_EVEN) {
    for (int64_t i = 0; i < n; i += 16) {
      const __mmask16 k = tail_mask16(n - i);
      const __m512 y = _mm512_mul_ps(_mm512_maskz_loadu_ps(lanes_on(k, mask != nullptr ? mask + i : nullptr), x + i), vinv);
      store_q_avx512(q + i, k,
                     _mm512_roundscale_ps(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    return;
  }
  if (n > 0 && (first & 1) != 0) {
    *q++ = quantize_stochastic_one(mask == nullptr || *mask++ != 0 ? *x : 0.0f, inv, seed, first++);
    --n, ++x;
  }
  const NoiseStates states(seed, first / 2, 16);
  __m512i s = _mm512_load_si512(states.state);
  const __m512i key_hi = _mm512_set1_epi32(int(states.key_hi));
  const __m512i step = _mm512_set1_epi32(int(16 * WEYL_STEP));
  for (int64_t i = 0; i < n; i += 32) {
    __m512 u[2];
    noise_avx512(s, key_hi, u[0], u[1]);
    s = _mm512_add_epi32(s, step);
    for (int h = 0; h < 2 && i + 16 * h < n; ++h) {
      const int64_t b = i + 16 * h;
      const __mmask16 k = tail_mask16(n - b);
      const __m512 v = _mm512_maskz_loadu_ps(lanes_on(k, mask != nullptr ? mask + b : nullptr), x + b);
      const __m512 y = _mm512_fmadd_ps(v, vinv, u[h]);
      store_q_avx512(q + b, k, _mm512_roundscale_ps(y, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC));
    }
  }
}

QSYNC_TARGET_AVX512 float amax_avx512(const float* x, const uint8_t* mask, int64_t n) {
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  // max_ps(v, acc) returns acc when v is NaN: NaN is ignored, as in the reference.
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                   _mm512_setzero_ps()};
  int64_t i = 0;
  if (mask != nullptr) {  // masked-out lanes load as +0
    for (; i < n; i += 16) {
      const __mmask16 k = lanes_on(tail_mask16(n - i), mask + i);
      acc[0] = _mm512_max_ps(_mm512_and_ps(_mm512_maskz_loadu_ps(k, x + i), abs_mask), acc[0]);
    }
  }
  for (; i + 64 <= n; i += 64) {
    for (int j = 0; j < 4; ++j) {
      const __m512 v = _mm512_and_ps(_mm512_loadu_ps(x + i + 16 * j), abs_mask);
      acc[j] = _mm512_max_ps(v, acc[j]);
    }
  }
  for (; i < n; i += 16) {
    const __m512 v = _mm512_and_ps(_mm512_maskz_loadu_ps(tail_mask16(n - i), x + i), abs_mask);
    acc[0] = _mm512_max_ps(v, acc[0]);
  }
  const __m512 m = _mm512_max_ps(_mm512_max_ps(acc[0], acc[1]), _mm512_max_ps(acc[2], acc[3]));
  return _mm512_reduce_max_ps(m);
}

// ---- AVX2 ---------------------------------------------------------------------------------

QSYNC_TARGET_AVX2 inline __m256i lowbias32_avx2(__m256i x) {
  x = _mm256_mullo_epi32(_mm256_xor_si256(x, _mm256_srli_epi32(x, 16)), _mm256_set1_epi32(int(HASH_MUL_1)));
  x = _mm256_mullo_epi32(_mm256_xor_si256(x, _mm256_srli_epi32(x, 15)), _mm256_set1_epi32(int(HASH_MUL_2)));
  return _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
}

// u for 16 consecutive elements from the states of their 8 pairs: the hashes' 16-bit words in
// index order (element 2j + k takes bits 16k .. 16k + 15 of hash j), elements 0-7 in lo.
QSYNC_TARGET_AVX2 inline void noise_avx2(__m256i s, __m256i key_hi, __m256& lo, __m256& hi) {
  const __m256i z = lowbias32_avx2(_mm256_xor_si256(s, key_hi));
  const __m256 unit = _mm256_set1_ps(0x1p-16f);
  lo = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu16_epi32(_mm256_castsi256_si128(z))), unit);
  hi = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu16_epi32(_mm256_extracti128_si256(z, 1))), unit);
}

// NaN -> 0, clamp, convert; returns the 8 int8 values in the low 64 bits.
QSYNC_TARGET_AVX2 inline __m128i pack_q_avx2(__m256 y) {
  y = _mm256_and_ps(y, _mm256_cmp_ps(y, y, _CMP_ORD_Q));
  y = _mm256_min_ps(_mm256_max_ps(y, _mm256_set1_ps(-127.0f)), _mm256_set1_ps(127.0f));
  const __m256i i32 = _mm256_cvtps_epi32(y);
  const __m128i i16 =
      _mm_packs_epi32(_mm256_castsi256_si128(i32), _mm256_extracti128_si256(i32, 1));
  return _mm_packs_epi16(i16, i16);
}

// Eight floats where their mask bytes are set, +0 elsewhere (all of them without a mask).
QSYNC_TARGET_AVX2 inline __m256 load_masked_avx2(const float* x, const uint8_t* mask) {
  const __m256 v = _mm256_loadu_ps(x);
  if (mask == nullptr) return v;
  const __m256i m = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(mask)));
  return _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_cmpgt_epi32(m, _mm256_setzero_si256())));
}

// x[0, n) (where mask, if any, is set; +0 elsewhere) quantized; `first` is x[0]'s flat index.
QSYNC_TARGET_AVX2 void quantize_avx2(const float* x, const uint8_t* mask, int8_t* q, int64_t n, float inv, Rounding r,
                                     uint64_t seed, uint64_t first) {
  const __m256 vinv = _mm256_set1_ps(inv);
  const bool stochastic = r == Rounding::STOCHASTIC;
  if (stochastic && n > 0 && (first & 1) != 0) {
    *q++ = quantize_stochastic_one(mask == nullptr || *mask++ != 0 ? *x : 0.0f, inv, seed, first++);
    --n, ++x;
  }
  const NoiseStates states(seed, first / 2, 8);
  __m256i s = _mm256_load_si256(reinterpret_cast<const __m256i*>(states.state));
  const __m256i key_hi = _mm256_set1_epi32(int(states.key_hi));
  const __m256i step = _mm256_set1_epi32(int(8 * WEYL_STEP));
  // 16 elements: two blocks of 8, stored as one 16-byte vector.
  auto block16 = [&](const float* xb, const uint8_t* mb) QSYNC_TARGET_AVX2 {
    const __m256 v0 = load_masked_avx2(xb, mb), v1 = load_masked_avx2(xb + 8, mb != nullptr ? mb + 8 : nullptr);
    __m256 y0, y1;
    if (stochastic) {
      __m256 u0, u1;
      noise_avx2(s, key_hi, u0, u1);
      s = _mm256_add_epi32(s, step);
      y0 = _mm256_round_ps(_mm256_fmadd_ps(v0, vinv, u0), _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
      y1 = _mm256_round_ps(_mm256_fmadd_ps(v1, vinv, u1), _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    } else {
      y0 = _mm256_round_ps(_mm256_mul_ps(v0, vinv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      y1 = _mm256_round_ps(_mm256_mul_ps(v1, vinv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    }
    return _mm_unpacklo_epi64(pack_q_avx2(y0), pack_q_avx2(y1));
  };
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i), block16(x + i, mask != nullptr ? mask + i : nullptr));
  if (i < n) {  // tail through a zero-padded block
    alignas(32) float in[16] = {};
    alignas(16) uint8_t in_mask[16] = {};
    alignas(16) int8_t out[16];
    std::copy(x + i, x + n, in);
    if (mask != nullptr) std::copy(mask + i, mask + n, in_mask);
    _mm_store_si128(reinterpret_cast<__m128i*>(out), block16(in, mask != nullptr ? in_mask : nullptr));
    std::copy(out, out + (n - i), q + i);
  }
}

QSYNC_TARGET_AVX2 float amax_avx2(const float* x, const uint8_t* mask, int64_t n) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int j = 0; j < 4; ++j) {
      const int64_t b = i + 8 * j;
      const __m256 v = _mm256_and_ps(load_masked_avx2(x + b, mask != nullptr ? mask + b : nullptr), abs_mask);
      acc[j] = _mm256_max_ps(v, acc[j]);  // returns acc[j] when v is NaN
    }
  }
  for (; i + 8 <= n; i += 8)
    acc[0] = _mm256_max_ps(_mm256_and_ps(load_masked_avx2(x + i, mask != nullptr ? mask + i : nullptr), abs_mask), acc[0]);
  const __m256 m = _mm256_max_ps(_mm256_max_ps(acc[0], acc[1]), _mm256_max_ps(acc[2], acc[3]));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, m);
  float r = 0.0f;
  for (float v : lanes) r = v > r ? v : r;
  const float tail = mask != nullptr ? amax_masked_ref(x + i, mask + i, n - i) : amax_ref(x + i, n - i);
  return tail > r ? tail : r;
}

// ---- dispatch helpers ---------------------------------------------------------------------

// mask: nullptr, or x's ReLU mask (masked-out elements count as +0).
float amax_span(Path p, const float* x, const uint8_t* mask, int64_t n) {
  if (p == Path::AVX512) return amax_avx512(x, mask, n);
  if (p == Path::AVX2) return amax_avx2(x, mask, n);
  return mask != nullptr ? amax_masked_ref(x, mask, n) : amax_ref(x, n);
}

// Quantizes x[0, n) whose first element has flat index `first` (vector paths only).
void quantize_span(Path p, const float* x, const uint8_t* mask, int8_t* q, int64_t n, float inv, Rounding r,
                   uint64_t seed, uint64_t first) {
  if (p == Path::AVX512)
    quantize_avx512(x, mask, q, n, inv, r, seed, first);
  else
    quantize_avx2(x, mask, q, n, inv, r, seed, first);
}

// amax over [0, n) in fixed chunks (one call when small): exact in any order.
float amax_chunked(Path p, const float* x, const uint8_t* mask, int64_t n) {
  if (p == Path::SCALAR || n < PARALLEL_MIN_ELEMENTS) return amax_span(p, x, mask, n);
  const int64_t chunks = (n + CHUNK_ELEMENTS - 1) / CHUNK_ELEMENTS;
  std::vector<float> partial(static_cast<size_t>(chunks));
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * CHUNK_ELEMENTS;
    partial[static_cast<size_t>(c)] =
        amax_span(p, x + begin, mask != nullptr ? mask + begin : nullptr, std::min(CHUNK_ELEMENTS, n - begin));
  }
  return *std::max_element(partial.begin(), partial.end());
}

}  // namespace

float amax(const float* x, int64_t n) { return amax_chunked(active_path(), x, nullptr, n); }

float amax_masked(const float* x, const uint8_t* mask, int64_t n) { return amax_chunked(active_path(), x, mask, n); }

void amax_rows(const float* x, int64_t rows, int64_t cols, float* out) {
  const Path p = active_path();
  if (p == Path::SCALAR) return amax_rows_ref(x, rows, cols, out);
  if (cols >= PARALLEL_MIN_ELEMENTS) {  // few long rows: parallel inside each row
    for (int64_t r = 0; r < rows; ++r) out[r] = amax(x + r * cols, cols);
    return;
  }
#pragma omp parallel for schedule(static) if (rows * cols >= PARALLEL_MIN_ELEMENTS)
  for (int64_t r = 0; r < rows; ++r) out[r] = amax_span(p, x + r * cols, nullptr, cols);
}

void quantize_int8(const float* x, int8_t* q, int64_t n, float scale, Rounding r, uint64_t seed) {
  const Path p = active_path();
  if (p == Path::SCALAR) return quantize_int8_ref(x, q, n, scale, r, seed);
  const float inv = 1.0f / scale;
  for_chunks(n, [&](int64_t b, int64_t c) {
    quantize_span(p, x + b, nullptr, q + b, c, inv, r, seed, static_cast<uint64_t>(b));
  });
}

void quantize_int8_masked(const float* x, const uint8_t* mask, int8_t* q, int64_t n, float scale, Rounding r,
                          uint64_t seed) {
  const Path p = active_path();
  if (p == Path::SCALAR) return quantize_int8_masked_ref(x, mask, q, n, scale, r, seed);
  const float inv = 1.0f / scale;
  for_chunks(n, [&](int64_t b, int64_t c) {
    quantize_span(p, x + b, mask + b, q + b, c, inv, r, seed, static_cast<uint64_t>(b));
  });
}

void quantize_int8_rows(const float* x, int8_t* q, int64_t rows, int64_t cols, const float* scales,
                        Rounding r, uint64_t seed) {
  const Path p = active_path();
  if (p == Path::SCALAR) return quantize_int8_rows_ref(x, q, rows, cols, scales, r, seed);
  if (cols >= PARALLEL_MIN_ELEMENTS) {  // few long rows: parallel inside each row
    for (int64_t row = 0; row < rows; ++row) {
      const int64_t off = row * cols;
      const float inv = 1.0f / scales[row];
      for_chunks(cols, [&](int64_t b, int64_t c) {
        quantize_span(p, x + off + b, nullptr, q + off + b, c, inv, r, seed, static_cast<uint64_t>(off + b));
      });
    }
    return;
  }
#pragma omp parallel for schedule(static) if (rows * cols >= PARALLEL_MIN_ELEMENTS)
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t off = row * cols;
    quantize_span(p, x + off, nullptr, q + off, cols, 1.0f / scales[row], r, seed,
                  static_cast<uint64_t>(off));
  }
}

}  // namespace qsync
