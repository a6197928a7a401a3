// File: kernels/cpu/conv_int8_input.cpp
// The NCHW -> NHWC byte transpose of conv_int8_input.h. The AVX2 path (also taken from AVX-512
// up) moves tiles of 16 channels x 32 positions: 16 rows of 32 bytes loaded, transposed in
// registers by four rounds of byte interleaves (each 128-bit lane a 16 x 16 tile), stored as 32
// runs of 16 channels. A plane whose size is no multiple of the tile ends with a tile shifted back
// to overlap the one before it (rewriting the same bytes), so only planes under 16 channels or 32
// positions take the scalar loops.
#include "kernels/cpu/conv_int8_input.h"

#include "kernels/cpu/simd_dispatch.h"

namespace qsync {
namespace {

constexpr int64_t TILE_C = 16, TILE_P = 32;

// dst (TILE_P, ldc) from src (TILE_C, ldp): one tile. Each round interleaves row i with row i + 8
// bytewise; after one, bit string (row r, column c) of an element, 4 + 4 bits, has rotated left
// by one (r3 r2 r1 r0 c3 c2 c1 c0 -> r2 r1 r0 c3 c2 c1 c0 r3), so after four rows and columns
// have traded places, in each 128-bit lane.
QSYNC_TARGET_AVX2 void transpose_tile_avx2(const int8_t* src, int64_t ldp, int8_t* dst, int64_t ldc) {
  __m256i r[16], t[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i * ldp));
  for (int round = 0; round < 4; ++round) {
    for (int i = 0; i < 8; ++i) {
      t[2 * i] = _mm256_unpacklo_epi8(r[i], r[i + 8]);
      t[2 * i + 1] = _mm256_unpackhi_epi8(r[i], r[i + 8]);
    }
    for (int i = 0; i < 16; ++i) r[i] = t[i];
  }
  for (int j = 0; j < 16; ++j) {  // lane 0: positions 0-15, lane 1: positions 16-31
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + j * ldc), _mm256_castsi256_si128(r[j]));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + (16 + j) * ldc), _mm256_extracti128_si256(r[j], 1));
  }
}

void transpose_plane_avx2(const int8_t* src, int64_t c, int64_t hw, int8_t* dst) {
  for (int64_t cb = 0; cb < c; cb += TILE_C) {
    const int64_t c0 = cb + TILE_C <= c ? cb : c - TILE_C;  // the last block shifted back
    for (int64_t pb = 0; pb < hw; pb += TILE_P) {
      const int64_t p0 = pb + TILE_P <= hw ? pb : hw - TILE_P;
      transpose_tile_avx2(src + c0 * hw + p0, hw, dst + p0 * c + c0, c);
    }
  }
}

}  // namespace

void int8_nchw_to_nhwc_ref(const int8_t* src, int64_t n, int64_t c, int64_t hw, int8_t* dst) {
  for (int64_t s = 0; s < n; ++s)
    for (int64_t p = 0; p < hw; ++p)
      for (int64_t ch = 0; ch < c; ++ch) dst[(s * hw + p) * c + ch] = src[(s * c + ch) * hw + p];
}

void int8_nchw_to_nhwc(const int8_t* src, int64_t n, int64_t c, int64_t hw, int8_t* dst) {
  if (simd::active_path() == simd::Path::SCALAR || c < TILE_C || hw < TILE_P)
    return int8_nchw_to_nhwc_ref(src, n, c, hw, dst);
  for (int64_t s = 0; s < n; ++s) transpose_plane_avx2(src + s * c * hw, c, hw, dst + s * c * hw);
}

}  // namespace qsync
