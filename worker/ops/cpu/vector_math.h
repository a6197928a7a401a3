// File: worker/ops/cpu/vector_math.h
// exp and the exact GELU (through erf) over float buffers, eight lanes at a time through glibc's vector
// math library (libmvec's AVX2 variants, accurate to a few ulp), with a scalar tail. The compiler
// does not vectorize std::erf / std::exp on its own (it would need -ffast-math).
#pragma once

#include <cstdint>

namespace qsync {

void exp_buffer(const float* x, float* y, int64_t n);  // y[i] = exp(x[i])

// y[i] = 0.5 x (1 + erf(x / sqrt 2)) and, where dydx is not null, its derivative
// dydx[i] = 0.5 (1 + erf(x / sqrt 2)) + x exp(-x^2 / 2) / sqrt(2 pi), in one pass over x (the
// derivative costs one more exp, not a second erf in the backward). Same rounding as the plain
// loops: no contractions into FMAs. In place (y == x) is allowed.
void gelu_buffer(const float* x, float* y, float* dydx, int64_t n);

}  // namespace qsync
