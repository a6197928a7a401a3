// File: kernels/cpu/quantize_cpu.cpp
// The vectorized quantize.h entry points (amax, amax_rows, quantize_int8, quantize_int8_rows,
// dequantize_int8) with runtime dispatch on cpu_isa_active(): AVX-512 (>= CpuIsa::AVX512),
// AVX2 + FMA (CpuIsa::AVX2), else the _ref functions. Bit-identical to the _ref functions:
// the arithmetic is the one spelled out at the top of ref/quantize_ref.cpp (x * (1/scale) then
// RNE; or floor(fma(x, 1/scale, u)); NaN -> 0; clamp to [-127, 127]), and the stochastic noise
// is the same splitmix64 stream, computed in 64-bit integer lanes.
//
// Buffers of n >= 2^16 elements are split into fixed chunks run by an OpenMP parallel for.
// Each quantized element depends only on its own value and flat index, and amax is a max
// (exact in any order), so the thread count never changes a bit.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC bug 105593 in AVX-512 headers
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/cpu_isa.h"
#include "kernels/quantize.h"

#define QSYNC_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#define QSYNC_TARGET_AVX512 \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c")))

namespace qsync {
namespace {

constexpr int64_t PARALLEL_MIN_ELEMENTS = int64_t{1} << 16;
constexpr int64_t CHUNK_ELEMENTS = int64_t{1} << 14;
constexpr uint64_t WEYL_STEP = 0x9e3779b97f4a7c15ull;
constexpr uint64_t MIX_MUL_1 = 0xbf58476d1ce4e5b9ull;
constexpr uint64_t MIX_MUL_2 = 0x94d049bb133111ebull;

// Runs fn(begin, count) over [0, n): one call when n is small, fixed chunks in parallel else.
template <class Fn>
void for_chunks(int64_t n, Fn fn) {
  if (n <= 0) return;
  if (n < PARALLEL_MIN_ELEMENTS) {
    fn(int64_t{0}, n);
    return;
  }
  const int64_t chunks = (n + CHUNK_ELEMENTS - 1) / CHUNK_ELEMENTS;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * CHUNK_ELEMENTS;
    fn(begin, std::min(CHUNK_ELEMENTS, n - begin));
  }
}

enum class Path { SCALAR, AVX2, AVX512 };

Path active_path() {
  const CpuIsa isa = cpu_isa_active();
  if (isa >= CpuIsa::AVX512) return Path::AVX512;
  if (isa >= CpuIsa::AVX2) return Path::AVX2;
  return Path::SCALAR;
}

uint64_t mix64(uint64_t z) {  // the splitmix64 finalizer, as in ref/quantize_ref.cpp
  z = (z ^ (z >> 30)) * MIX_MUL_1;
  z = (z ^ (z >> 27)) * MIX_MUL_2;
  return z ^ (z >> 31);
}

// The splitmix64 states of elements first .. first + lanes - 1: mix64(seed) + (i + 1) * step.
void initial_states(uint64_t seed, uint64_t first, int lanes, uint64_t* out) {
  const uint64_t key = mix64(seed);
  for (int l = 0; l < lanes; ++l) out[l] = key + (first + static_cast<uint64_t>(l) + 1) * WEYL_STEP;
}

// ---- AVX-512 ------------------------------------------------------------------------------

inline __mmask16 tail_mask16(int64_t left) {
  return left >= 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1);
}

QSYNC_TARGET_AVX512 inline __m512i mix64_avx512(__m512i z) {
  z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 30)),
                         _mm512_set1_epi64(MIX_MUL_1));
  z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 27)),
                         _mm512_set1_epi64(MIX_MUL_2));
  return _mm512_xor_si512(z, _mm512_srli_epi64(z, 31));
}

// u for 16 consecutive elements from their states (lanes 0-7 in s0, 8-15 in s1).
QSYNC_TARGET_AVX512 inline __m512 noise_avx512(__m512i s0, __m512i s1) {
  const __m256i lo = _mm512_cvtepi64_epi32(_mm512_srli_epi64(mix64_avx512(s0), 40));
  const __m256i hi = _mm512_cvtepi64_epi32(_mm512_srli_epi64(mix64_avx512(s1), 40));
  const __m512i bits = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
  return _mm512_mul_ps(_mm512_cvtepi32_ps(bits), _mm512_set1_ps(0x1p-24f));
}

// NaN -> 0, clamp to [-127, 127], convert (exact) and store the masked lanes as int8.
QSYNC_TARGET_AVX512 inline void store_q_avx512(int8_t* q, __mmask16 k, __m512 y) {
  y = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(y, y, _CMP_ORD_Q), y);
  y = _mm512_min_ps(_mm512_max_ps(y, _mm512_set1_ps(-127.0f)), _mm512_set1_ps(127.0f));
  _mm512_mask_cvtsepi32_storeu_epi8(q, k, _mm512_cvtps_epi32(y));
}

QSYNC_TARGET_AVX512 void quantize_avx512(const float* x, int8_t* q, int64_t n, float inv,
                                         Rounding r, uint64_t seed, uint64_t first) {
  const __m512 vinv = _mm512_set1_ps(inv);
  if (r == Rounding::NEAREST_EVEN) {
    for (int64_t i = 0; i < n; i += 16) {
      const __mmask16 k = tail_mask16(n - i);
      const __m512 y = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + i), vinv);
      store_q_avx512(q + i, k,
                     _mm512_roundscale_ps(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    return;
  }
  alignas(64) uint64_t st[16];
  initial_states(seed, first, 16, st);
  __m512i s0 = _mm512_load_si512(st);
  __m512i s1 = _mm512_load_si512(st + 8);
  const __m512i step = _mm512_set1_epi64(static_cast<long long>(16 * WEYL_STEP));
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = tail_mask16(n - i);
    const __m512 u = noise_avx512(s0, s1);
    s0 = _mm512_add_epi64(s0, step);
    s1 = _mm512_add_epi64(s1, step);
    const __m512 y = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, x + i), vinv, u);
    store_q_avx512(q + i, k, _mm512_roundscale_ps(y, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC));
  }
}

QSYNC_TARGET_AVX512 float amax_avx512(const float* x, int64_t n) {
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  // max_ps(v, acc) returns acc when v is NaN: NaN is ignored, as in the reference.
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                   _mm512_setzero_ps()};
  int64_t i = 0;
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

QSYNC_TARGET_AVX512 void dequantize_avx512(const int8_t* q, float* x, int64_t n, float scale) {
  const __m512 vs = _mm512_set1_ps(scale);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = tail_mask16(n - i);
    const __m512i v = _mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(k, q + i));
    _mm512_mask_storeu_ps(x + i, k, _mm512_mul_ps(_mm512_cvtepi32_ps(v), vs));
  }
}

// ---- AVX2 ---------------------------------------------------------------------------------

// 64 x 64 -> low 64 bits multiply by a constant c = cH 2^32 + cL: aL cL (one 32 x 32 -> 64
// product) plus (aH cL + aL cH mod 2^32) 2^32, both cross terms from one 32-bit multiply.
QSYNC_TARGET_AVX2 inline __m256i mullo64_avx2(__m256i a, uint64_t c) {
  const __m256i c_lo = _mm256_set1_epi64x(static_cast<long long>(c & 0xffffffffull));
  const __m256i c_swapped = _mm256_set1_epi64x(static_cast<long long>((c << 32) | (c >> 32)));  // [cH, cL]
  const __m256i cross = _mm256_mullo_epi32(a, c_swapped);  // 32-bit words [aL cH, aH cL]
  const __m256i cross_sum = _mm256_add_epi32(cross, _mm256_srli_epi64(cross, 32));  // low word: their sum
  return _mm256_add_epi64(_mm256_mul_epu32(a, c_lo), _mm256_slli_epi64(cross_sum, 32));
}

// Bits 40-63 of mix64(z), the splitmix64 finalizer, as a 64-bit lane < 2^24. The finalizer's last
// xor-shift (z ^ z >> 31) leaves these bits alone, and of the last multiply only its high word is
// needed: hi(aL cL) + aH cL + aL cH mod 2^32.
QSYNC_TARGET_AVX2 inline __m256i mix64_top24_avx2(__m256i z) {
  z = mullo64_avx2(_mm256_xor_si256(z, _mm256_srli_epi64(z, 30)), MIX_MUL_1);
  z = _mm256_xor_si256(z, _mm256_srli_epi64(z, 27));
  const __m256i c_lo = _mm256_set1_epi64x(static_cast<long long>(MIX_MUL_2 & 0xffffffffull));
  const __m256i c_swapped = _mm256_set1_epi64x(static_cast<long long>((MIX_MUL_2 << 32) | (MIX_MUL_2 >> 32)));
  const __m256i cross = _mm256_mullo_epi32(z, c_swapped);                     // [zL cH, zH cL]
  const __m256i high = _mm256_add_epi32(_mm256_mul_epu32(z, c_lo),           // high word: hi(zL cL)
                                        _mm256_add_epi32(cross, _mm256_slli_epi64(cross, 32)));  // + zL cH + zH cL
  return _mm256_srli_epi64(high, 40);
}

// u for 8 consecutive elements (lanes 0-3 in s0, 4-7 in s1).
QSYNC_TARGET_AVX2 inline __m256 noise_avx2(__m256i s0, __m256i s1) {
  const __m256i a = mix64_top24_avx2(s0);  // < 2^24 in each 64-bit lane
  const __m256i b = mix64_top24_avx2(s1);
  // 32-bit words [a0 b0 a1 b1 a2 b2 a3 b3] -> [a0 a1 a2 a3 b0 b1 b2 b3].
  const __m256i ab = _mm256_or_si256(a, _mm256_slli_epi64(b, 32));
  const __m256i bits = _mm256_permutevar8x32_epi32(ab, _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7));
  return _mm256_mul_ps(_mm256_cvtepi32_ps(bits), _mm256_set1_ps(0x1p-24f));
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

QSYNC_TARGET_AVX2 void quantize_avx2(const float* x, int8_t* q, int64_t n, float inv, Rounding r,
                                     uint64_t seed, uint64_t first) {
  const __m256 vinv = _mm256_set1_ps(inv);
  alignas(32) uint64_t st[8];
  initial_states(seed, first, 8, st);
  __m256i s0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(st));
  __m256i s1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(st + 4));
  const __m256i step = _mm256_set1_epi64x(static_cast<long long>(8 * WEYL_STEP));
  const bool stochastic = r == Rounding::STOCHASTIC;
  auto block = [&](const float* xb) QSYNC_TARGET_AVX2 {
    const __m256 v = _mm256_loadu_ps(xb);
    if (!stochastic)
      return pack_q_avx2(
          _mm256_round_ps(_mm256_mul_ps(v, vinv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    const __m256 u = noise_avx2(s0, s1);
    s0 = _mm256_add_epi64(s0, step);
    s1 = _mm256_add_epi64(s1, step);
    return pack_q_avx2(
        _mm256_round_ps(_mm256_fmadd_ps(v, vinv, u), _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC));
  };
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm_storel_epi64(reinterpret_cast<__m128i*>(q + i), block(x + i));
  if (i < n) {  // tail through a zero-padded block
    alignas(32) float in[8] = {};
    alignas(16) int8_t out[16];
    std::copy(x + i, x + n, in);
    _mm_store_si128(reinterpret_cast<__m128i*>(out), block(in));
    std::copy(out, out + (n - i), q + i);
  }
}

QSYNC_TARGET_AVX2 float amax_avx2(const float* x, int64_t n) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int j = 0; j < 4; ++j) {
      const __m256 v = _mm256_and_ps(_mm256_loadu_ps(x + i + 8 * j), abs_mask);
      acc[j] = _mm256_max_ps(v, acc[j]);  // returns acc[j] when v is NaN
    }
  }
  for (; i + 8 <= n; i += 8)
    acc[0] = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + i), abs_mask), acc[0]);
  const __m256 m = _mm256_max_ps(_mm256_max_ps(acc[0], acc[1]), _mm256_max_ps(acc[2], acc[3]));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, m);
  float r = 0.0f;
  for (float v : lanes) r = v > r ? v : r;
  const float tail = amax_ref(x + i, n - i);
  return tail > r ? tail : r;
}

QSYNC_TARGET_AVX2 void dequantize_avx2(const int8_t* q, float* x, int64_t n, float scale) {
  const __m256 vs = _mm256_set1_ps(scale);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i v =
        _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + i)));
    _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_cvtepi32_ps(v), vs));
  }
  dequantize_int8_ref(q + i, x + i, n - i, scale);  // the same single multiply per element
}

// ---- dispatch helpers ---------------------------------------------------------------------

float amax_span(Path p, const float* x, int64_t n) {
  if (p == Path::AVX512) return amax_avx512(x, n);
  if (p == Path::AVX2) return amax_avx2(x, n);
  return amax_ref(x, n);
}

// Quantizes x[0, n) whose first element has flat index `first` (vector paths only).
void quantize_span(Path p, const float* x, int8_t* q, int64_t n, float inv, Rounding r,
                   uint64_t seed, uint64_t first) {
  if (p == Path::AVX512)
    quantize_avx512(x, q, n, inv, r, seed, first);
  else
    quantize_avx2(x, q, n, inv, r, seed, first);
}

}  // namespace

float amax(const float* x, int64_t n) {
  const Path p = active_path();
  if (p == Path::SCALAR || n < PARALLEL_MIN_ELEMENTS) return amax_span(p, x, n);
  const int64_t chunks = (n + CHUNK_ELEMENTS - 1) / CHUNK_ELEMENTS;
  std::vector<float> partial(static_cast<size_t>(chunks));
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * CHUNK_ELEMENTS;
    partial[static_cast<size_t>(c)] = amax_span(p, x + begin, std::min(CHUNK_ELEMENTS, n - begin));
  }
  return *std::max_element(partial.begin(), partial.end());
}

void amax_rows(const float* x, int64_t rows, int64_t cols, float* out) {
  const Path p = active_path();
  if (p == Path::SCALAR) return amax_rows_ref(x, rows, cols, out);
  if (cols >= PARALLEL_MIN_ELEMENTS) {  // few long rows: parallel inside each row
    for (int64_t r = 0; r < rows; ++r) out[r] = amax(x + r * cols, cols);
    return;
  }
#pragma omp parallel for schedule(static) if (rows * cols >= PARALLEL_MIN_ELEMENTS)
  for (int64_t r = 0; r < rows; ++r) out[r] = amax_span(p, x + r * cols, cols);
}

void quantize_int8(const float* x, int8_t* q, int64_t n, float scale, Rounding r, uint64_t seed) {
  const Path p = active_path();
  if (p == Path::SCALAR) return quantize_int8_ref(x, q, n, scale, r, seed);
  const float inv = 1.0f / scale;
  for_chunks(n, [&](int64_t b, int64_t c) {
    quantize_span(p, x + b, q + b, c, inv, r, seed, static_cast<uint64_t>(b));
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
        quantize_span(p, x + off + b, q + off + b, c, inv, r, seed, static_cast<uint64_t>(off + b));
      });
    }
    return;
  }
#pragma omp parallel for schedule(static) if (rows * cols >= PARALLEL_MIN_ELEMENTS)
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t off = row * cols;
    quantize_span(p, x + off, q + off, cols, 1.0f / scales[row], r, seed,
                  static_cast<uint64_t>(off));
  }
}

void dequantize_int8(const int8_t* q, float* x, int64_t n, float scale) {
  const Path p = active_path();
  if (p == Path::SCALAR) return dequantize_int8_ref(q, x, n, scale);
  for_chunks(n, [&](int64_t b, int64_t c) {
    if (p == Path::AVX512)
      dequantize_avx512(q + b, x + b, c, scale);
    else
      dequantize_avx2(q + b, x + b, c, scale);
  });
}

}  // namespace qsync
