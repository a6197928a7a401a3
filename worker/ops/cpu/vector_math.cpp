// File: worker/ops/cpu/vector_math.cpp
// exp_buffer through libmvec (x86-64 vector function ABI, AVX2: "_ZGVdN8v_expf").
#include "worker/ops/cpu/vector_math.h"

#include <immintrin.h>

#include <cmath>

extern "C" {
__m256 _ZGVdN8v_expf(__m256 x);
}

namespace qsync {

__attribute__((target("avx2,fma"))) void exp_buffer(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _ZGVdN8v_expf(_mm256_loadu_ps(x + i)));
  for (; i < n; ++i) y[i] = std::exp(x[i]);
}

}  // namespace qsync
