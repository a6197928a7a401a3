// File: worker/ops/cpu/gelu_math.cpp
// The exact (erf) GELU of vector_math.h, with its derivative, written out in FMAs so that the
// scalar reference, AVX2 and AVX-512 give the same bits (runtime dispatch on cpu_isa_active()).
// For x = +-a, with e = exp(-a^2 / 2) and t = 1 / (1 + a / (2 sqrt 2)):
//   erfc(a / sqrt 2) = t e P(t)      P: degree 9, fitted to erfc(z) exp(z^2) / t on the t of
//                                    |x| <= 13.19, relative error 1.2e-7 in float arithmetic
//   Phi(x) = q = erfc / 2 (x < 0), 1 - q (x >= 0);  y = x Phi(x);  dy/dx = Phi(x) + x e / sqrt(2 pi)
// so the negative tail keeps its relative accuracy (no 1 + erf cancelling). a^2 is split into
// h + l (an FMA gives the rounding error l) and e = exp(-h/2) (1 - l/2), so e carries no error
// from squaring. exp(-h/2) is Cephes' expf: n = rint(u log2 e), r = u - n ln 2 (two parts), a
// degree-6 polynomial, 2^n added to the exponent bits. Past |x| = 13 (e < 2e-37, Phi within
// 1e-38 of 0 or 1) a is clamped there and q and e are 0. NaN propagates through x.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/simd_dispatch.h"
#include "worker/ops/cpu/vector_math.h"

namespace qsync {
namespace {

constexpr float TAIL = 13.0f;                    // |x| past which Phi is 0 or 1 within 1e-38
constexpr float T_SCALE = 0.35355339059327376f;  // 1 / (2 sqrt 2)
constexpr float INV_SQRT_2PI = 0.39894228040143267794f;
constexpr float LOG2E = 1.44269504088896341f;
constexpr float LN2_HI = 0.693359375f, LN2_LO = -2.12194440e-4f;
constexpr float EXP_P[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                            4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};
constexpr float ERFC_P[10] = {0.014421282336115837f, -0.13466373085975647f, 0.4552188813686371f,
                              -0.7042592763900757f,  0.44896358251571655f,  -0.11269842833280563f,
                              0.2303241491317749f,   0.23766562342643738f,  0.28296878933906555f,
                              0.28205910325050354f};

// e^u for u in [-84.5, 0] (a normal result).
float exp_nonpositive_ref(float u) {
  const float n = std::nearbyint(u * LOG2E);
  const float r = std::fma(n, -LN2_LO, std::fma(n, -LN2_HI, u));
  float p = EXP_P[0];
  for (int k = 1; k < 6; ++k) p = std::fma(p, r, EXP_P[k]);
  const float y = std::fma(p, r * r, r) + 1.0f;
  uint32_t bits;
  std::memcpy(&bits, &y, 4);
  bits += static_cast<uint32_t>(static_cast<int32_t>(n)) << 23;
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

void gelu_one_ref(float x, float* y, float* dydx) {
  const float a_abs = std::fabs(x);
  const float a = a_abs < TAIL ? a_abs : TAIL;  // NaN: TAIL (x carries the NaN)
  const float h = a * a, l = std::fma(a, a, -h);
  const float e0 = exp_nonpositive_ref(-0.5f * h);
  const bool tail = !(a_abs < TAIL);
  const float e = tail ? 0.0f : std::fma(e0, -0.5f * l, e0);
  const float t = 1.0f / std::fma(a, T_SCALE, 1.0f);
  float p = ERFC_P[0];
  for (int k = 1; k < 10; ++k) p = std::fma(p, t, ERFC_P[k]);
  const float q = tail ? 0.0f : 0.5f * ((t * e) * p);
  const float phi = x < 0.0f ? q : 1.0f - q;
  *y = x * phi;
  if (dydx != nullptr) *dydx = phi + (x * INV_SQRT_2PI) * e;
}

QSYNC_TARGET_AVX2 void gelu_avx2(const float* x, float* y, float* dydx, int64_t n) {
  const __m256 tail = _mm256_set1_ps(TAIL), half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256 a_abs = _mm256_and_ps(v, abs_mask);
    const __m256 a = _mm256_min_ps(a_abs, tail);  // NaN: tail, as a_abs < TAIL ? a_abs : TAIL
    const __m256 in = _mm256_cmp_ps(a_abs, tail, _CMP_LT_OQ);
    const __m256 h = _mm256_mul_ps(a, a), l = _mm256_fmsub_ps(a, a, h);
    const __m256 u = _mm256_mul_ps(_mm256_set1_ps(-0.5f), h);
    const __m256 nn = _mm256_round_ps(_mm256_mul_ps(u, _mm256_set1_ps(LOG2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256 r = _mm256_fmadd_ps(nn, _mm256_set1_ps(-LN2_LO), _mm256_fmadd_ps(nn, _mm256_set1_ps(-LN2_HI), u));
    __m256 p = _mm256_set1_ps(EXP_P[0]);
    for (int k = 1; k < 6; ++k) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_P[k]));
    const __m256 ey = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), one);
    const __m256 e0 = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(ey), _mm256_slli_epi32(_mm256_cvtps_epi32(nn), 23)));
    const __m256 e = _mm256_and_ps(in, _mm256_fmadd_ps(e0, _mm256_mul_ps(_mm256_set1_ps(-0.5f), l), e0));
    const __m256 t = _mm256_div_ps(one, _mm256_fmadd_ps(a, _mm256_set1_ps(T_SCALE), one));
    __m256 pe = _mm256_set1_ps(ERFC_P[0]);
    for (int k = 1; k < 10; ++k) pe = _mm256_fmadd_ps(pe, t, _mm256_set1_ps(ERFC_P[k]));
    const __m256 q = _mm256_and_ps(in, _mm256_mul_ps(half, _mm256_mul_ps(_mm256_mul_ps(t, e), pe)));
    const __m256 phi = _mm256_blendv_ps(_mm256_sub_ps(one, q), q, _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_LT_OQ));
    _mm256_storeu_ps(y + i, _mm256_mul_ps(v, phi));
    if (dydx != nullptr)
      _mm256_storeu_ps(dydx + i, _mm256_add_ps(phi, _mm256_mul_ps(_mm256_mul_ps(v, _mm256_set1_ps(INV_SQRT_2PI)), e)));
  }
  for (; i < n; ++i) gelu_one_ref(x[i], y + i, dydx != nullptr ? dydx + i : nullptr);
}

QSYNC_TARGET_AVX512 void gelu_avx512(const float* x, float* y, float* dydx, int64_t n) {
  const __m512 tail = _mm512_set1_ps(TAIL), half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = simd::tail_mask16(n - i);
    const __m512 v = _mm512_maskz_loadu_ps(k, x + i);
    const __m512 a_abs = _mm512_abs_ps(v);
    const __m512 a = _mm512_min_ps(a_abs, tail);  // NaN: tail
    const __mmask16 in = _mm512_cmp_ps_mask(a_abs, tail, _CMP_LT_OQ);
    const __m512 h = _mm512_mul_ps(a, a), l = _mm512_fmsub_ps(a, a, h);
    const __m512 u = _mm512_mul_ps(_mm512_set1_ps(-0.5f), h);
    const __m512 nn = _mm512_roundscale_ps(_mm512_mul_ps(u, _mm512_set1_ps(LOG2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 r = _mm512_fmadd_ps(nn, _mm512_set1_ps(-LN2_LO), _mm512_fmadd_ps(nn, _mm512_set1_ps(-LN2_HI), u));
    __m512 p = _mm512_set1_ps(EXP_P[0]);
    for (int j = 1; j < 6; ++j) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_P[j]));
    const __m512 ey = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), one);
    const __m512 e0 = _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(ey), _mm512_slli_epi32(_mm512_cvtps_epi32(nn), 23)));
    const __m512 e = _mm512_maskz_mov_ps(in, _mm512_fmadd_ps(e0, _mm512_mul_ps(_mm512_set1_ps(-0.5f), l), e0));
    const __m512 t = _mm512_div_ps(one, _mm512_fmadd_ps(a, _mm512_set1_ps(T_SCALE), one));
    __m512 pe = _mm512_set1_ps(ERFC_P[0]);
    for (int j = 1; j < 10; ++j) pe = _mm512_fmadd_ps(pe, t, _mm512_set1_ps(ERFC_P[j]));
    const __m512 q = _mm512_maskz_mov_ps(in, _mm512_mul_ps(half, _mm512_mul_ps(_mm512_mul_ps(t, e), pe)));
    const __m512 phi = _mm512_mask_mov_ps(_mm512_sub_ps(one, q), _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LT_OQ), q);
    _mm512_mask_storeu_ps(y + i, k, _mm512_mul_ps(v, phi));
    if (dydx != nullptr)
      _mm512_mask_storeu_ps(dydx + i, k, _mm512_add_ps(phi, _mm512_mul_ps(_mm512_mul_ps(v, _mm512_set1_ps(INV_SQRT_2PI)), e)));
  }
}

}  // namespace

void gelu_buffer_ref(const float* x, float* y, float* dydx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) gelu_one_ref(x[i], y + i, dydx != nullptr ? dydx + i : nullptr);
}

void gelu_buffer(const float* x, float* y, float* dydx, int64_t n) {
  const simd::Path p = simd::active_path();
  if (p == simd::Path::AVX512) return gelu_avx512(x, y, dydx, n);
  if (p == simd::Path::AVX2) return gelu_avx2(x, y, dydx, n);
  gelu_buffer_ref(x, y, dydx, n);
}

}  // namespace qsync
