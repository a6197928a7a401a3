// File: worker/ops/cpu/tile_transpose.h
// An 8x8 FP32 tile read transposed into eight AVX2 registers: t[j] lane g = m[g * ld + j].
// Kernels that sum eight rows side by side (layer norm's moments, attention's row sums) use it to
// give each row a lane of its own, so a row's channels are still added one after another in
// their order (the plain loops' order, bit for bit) but eight rows go at once, from contiguous
// loads instead of strided scalar ones.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace qsync {

__attribute__((target("avx2"))) inline void load_tile_transposed(const float* m, int64_t ld, __m256 t[8]) {
  __m256 r[8], u[8];
  for (int g = 0; g < 8; ++g) r[g] = _mm256_loadu_ps(m + g * ld);
  for (int g = 0; g < 8; g += 2) {
    u[g] = _mm256_unpacklo_ps(r[g], r[g + 1]);  // r0[0] r1[0] r0[1] r1[1] | r0[4] r1[4] r0[5] r1[5]
    u[g + 1] = _mm256_unpackhi_ps(r[g], r[g + 1]);
  }
  for (int h = 0; h < 8; h += 4)
    for (int q = 0; q < 2; ++q) {
      r[h + 2 * q] = _mm256_shuffle_ps(u[h + q], u[h + q + 2], 0x44);  // columns 4q+0 (and +4) of 4 rows
      r[h + 2 * q + 1] = _mm256_shuffle_ps(u[h + q], u[h + q + 2], 0xEE);
    }
  for (int j = 0; j < 4; ++j) {
    t[j] = _mm256_permute2f128_ps(r[j], r[j + 4], 0x20);
    t[j + 4] = _mm256_permute2f128_ps(r[j], r[j + 4], 0x31);
  }
}

}  // namespace qsync
