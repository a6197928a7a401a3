// File: kernels/cpu/simd_dispatch.h
// What the vectorized CPU kernels share (kernels/cpu, and worker/ops/cpu's GELU): the function
// target attributes of each ISA path, the path cpu_isa_active() selects, the tail mask of a
// 16-lane AVX-512 loop, and the chunking that runs a large elementwise buffer in parallel.
//
//   QSYNC_TARGET_AVX512 void twice_avx512(const float* x, float* y, int64_t n) { ... }
//   for_chunks(n, [&](int64_t b, int64_t c) { twice_avx512(x + b, y + b, c); });
//
// Chunks are fixed (CHUNK_ELEMENTS), so an elementwise kernel gives the same bits at any thread
// count. GCC 12 reports its own _mm512_undefined_* placeholders as maybe-uninitialized (GCC bug
// 105593) when AVX-512 intrinsics are inlined; the warning is silenced for the header only.
#pragma once

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#include <algorithm>
#include <cstdint>

#include "kernels/cpu_isa.h"

#define QSYNC_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#define QSYNC_TARGET_AVX512 \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c")))
#define QSYNC_TARGET_AVX512_BF16 \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,avx2,fma,f16c")))

namespace qsync::simd {

constexpr int64_t PARALLEL_MIN_ELEMENTS = int64_t{1} << 16;
constexpr int64_t CHUNK_ELEMENTS = int64_t{1} << 14;

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

inline Path active_path() {
  const CpuIsa isa = cpu_isa_active();
  if (isa >= CpuIsa::AVX512) return Path::AVX512;
  if (isa >= CpuIsa::AVX2) return Path::AVX2;
  return Path::SCALAR;
}

// The lanes of a 16-lane loop still inside the buffer when `left` elements remain.
inline __mmask16 tail_mask16(int64_t left) {
  return left >= 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1);
}

}  // namespace qsync::simd
