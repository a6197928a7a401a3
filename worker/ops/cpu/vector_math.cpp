// File: worker/ops/cpu/vector_math.cpp
// libmvec calls (x86-64 vector function ABI, AVX2: "_ZGVdN8v_<name>").
#include "worker/ops/cpu/vector_math.h"

#include <immintrin.h>

#include <cmath>

extern "C" {
__m256 _ZGVdN8v_erff(__m256 x);
__m256 _ZGVdN8v_expf(__m256 x);
}

namespace qsync {
namespace {

constexpr float INV_SQRT2 = 0.70710678118654752440f;
constexpr float INV_SQRT_2PI = 0.39894228040143267794f;

}  // namespace

__attribute__((target("avx2,fma"))) void exp_buffer(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _ZGVdN8v_expf(_mm256_loadu_ps(x + i)));
  for (; i < n; ++i) y[i] = std::exp(x[i]);
}

__attribute__((target("avx2,fma"))) void gelu_buffer(const float* x, float* y, float* dydx, int64_t n) {
  const __m256 half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f), minus_half = _mm256_set1_ps(-0.5f);
  const __m256 inv_sqrt2 = _mm256_set1_ps(INV_SQRT2), inv_sqrt_2pi = _mm256_set1_ps(INV_SQRT_2PI);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256 onep = _mm256_add_ps(one, _ZGVdN8v_erff(_mm256_mul_ps(v, inv_sqrt2)));  // 1 + erf
    _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_mul_ps(half, v), onep));
    if (dydx == nullptr) continue;
    const __m256 pdf = _ZGVdN8v_expf(_mm256_mul_ps(_mm256_mul_ps(minus_half, v), v));
    _mm256_storeu_ps(dydx + i, _mm256_add_ps(_mm256_mul_ps(half, onep), _mm256_mul_ps(_mm256_mul_ps(v, inv_sqrt_2pi), pdf)));
  }
  for (; i < n; ++i) {
    const float v = x[i], onep = 1.0f + std::erf(v * INV_SQRT2);
    y[i] = 0.5f * v * onep;
    if (dydx != nullptr) dydx[i] = 0.5f * onep + v * INV_SQRT_2PI * std::exp(-0.5f * v * v);
  }
}

}  // namespace qsync
