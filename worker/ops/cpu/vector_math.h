// File: worker/ops/cpu/vector_math.h
// exp and the exact GELU over float buffers. exp: eight lanes at a time through glibc's vector
// math library (libmvec's AVX2 expf, a few ulp), with a scalar tail; the compiler does not
// vectorize std::exp on its own (it would need -ffast-math). GELU: our own erfc and exp in FMAs
// (gelu_math.cpp), the same bits from the scalar reference, AVX2 and AVX-512.
#pragma once

#include <cstdint>

namespace qsync {

void exp_buffer(const float* x, float* y, int64_t n);  // y[i] = exp(x[i])

// y[i] = x Phi(x), Phi(x) = 0.5 (1 + erf(x / sqrt 2)) = 0.5 erfc(-x / sqrt 2) and, where dydx is
// not null, its derivative dydx[i] = Phi(x) + x exp(-x^2 / 2) / sqrt(2 pi), in one pass over x
// (the backward only multiplies). y within 4e-7 relative of the exact value (the negative tail
// included; 1e-37 absolute past |x| = 13, where Phi is taken as 0 or 1), the derivative within
// 2e-7; the thread count and the ISA never change a bit. In place (y == x)
// is allowed.
void gelu_buffer_ref(const float* x, float* y, float* dydx, int64_t n);
void gelu_buffer(const float* x, float* y, float* dydx, int64_t n);

}  // namespace qsync
