// File: worker/ops/cpu/vector_math.h
// erf and exp over float buffers, eight lanes at a time through glibc's vector math library
// (libmvec's AVX2 variants, accurate to a few ulp), with a scalar tail. The compiler does not
// vectorize std::erf / std::exp on its own (it would need -ffast-math).
#pragma once

#include <cstdint>

namespace qsync {

void erf_buffer(const float* x, float* y, int64_t n);  // y[i] = erf(x[i])
void exp_buffer(const float* x, float* y, int64_t n);  // y[i] = exp(x[i])

}  // namespace qsync
