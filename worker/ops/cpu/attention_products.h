// File: worker/ops/cpu/attention_products.h
// The small matrix products of attention's score part (cpu_attention.cpp), over one (batch, head)
// pair, generic over the vector width W: eight lanes (AVX2) or sixteen (AVX-512, instantiated only
// inside QSYNC_TARGET_AVX512 functions; the products are always_inline, so they compile for their
// caller's ISA; transpose_head is AVX2 at either width). Each product runs as a register block: R
// output rows by two vectors of columns (2R independent vector sums) per pass over the summed
// index, then one vector, then eight lanes (when W is wider), then one column. Every output is
// summed from 0 over its index in the oracle's order (cpu_attention_ref.cpp): a lane is an
// output, so the width changes how many outputs go at once, never an output's adds, and both
// widths give the oracle's bits (-ffp-contract=off fuses nothing).
#pragma once

#include <algorithm>
#include <cstdint>

#include "worker/ops/cpu/tile_transpose.h"

namespace qsync::attention_products {

// W floats in one vector register (GCC/clang vector extension; unaligned loads and stores): eight
// (AVX2) or sixteen (AVX-512). The types travel as a width, never as a template type argument,
// which would drop their aligned(4) (allowing aligned moves, which fault on unaligned rows).
template <int64_t W>
struct Lanes;
template <>
struct Lanes<8> {
  typedef float vec __attribute__((vector_size(32), aligned(4)));
};
template <>
struct Lanes<16> {
  typedef float vec __attribute__((vector_size(64), aligned(4)));
};

// The vector at p, by reference (no vector passes by value: an AVX-512 vector returned from a
// function compiled for the AVX2 baseline would change the ABI).
template <int64_t W>
[[gnu::always_inline]] inline const typename Lanes<W>::vec& vec_at(const float* p) {
  static_assert(alignof(typename Lanes<W>::vec) == alignof(float), "the vector type lost its aligned(4)");
  return *reinterpret_cast<const typename Lanes<W>::vec*>(p);
}
template <int64_t W>
[[gnu::always_inline]] inline typename Lanes<W>::vec& vec_at(float* p) {
  return *reinterpret_cast<typename Lanes<W>::vec*>(p);
}

// The output rows of one register block.
constexpr int64_t BLOCK_ROWS = 4;

// Every product here is one register block: out[r, c] = sum over k < K of x[r * x_r + k * x_k] *
// y[k * y_stride + c], each from 0 in k order, for r < R; x gives one scalar per (row, k), y one
// row of columns per k. q k^T and dout v^T read x along a row (x_k = 1) and y from a transposed
// head; att v, dq, dv and dk read x from a (T, T) matrix, along a row or down a column.

// Columns [c, c + 2W) (TWO) or [c, c + W) of the block.
template <int64_t R, int64_t W, bool TWO>
[[gnu::always_inline]] inline void product_columns(const float* x, int64_t x_r, int64_t x_k, int64_t K, const float* y,
                                                   int64_t y_stride, int64_t c, float* out, int64_t out_stride) {
  using V = typename Lanes<W>::vec;
  V lo[R], hi[R];
  for (int64_t r = 0; r < R; ++r) lo[r] = hi[r] = V{};
  for (int64_t k = 0; k < K; ++k) {
    const V y0 = vec_at<W>(y + k * y_stride + c);
    const V y1 = TWO ? vec_at<W>(y + k * y_stride + c + W) : V{};
    for (int64_t r = 0; r < R; ++r) {
      const float xv = x[r * x_r + k * x_k];
      lo[r] += xv * y0;
      if (TWO) hi[r] += xv * y1;
    }
  }
  for (int64_t r = 0; r < R; ++r) {
    vec_at<W>(out + r * out_stride + c) = lo[r];
    if (TWO) vec_at<W>(out + r * out_stride + c + W) = hi[r];
  }
}

// The block over columns c < n: two vectors at a time, then one, then eight lanes (when W is
// wider), then one column. out rows out_stride apart (the oracle adds onto zeros: the same sums).
template <int64_t R, int64_t W>
[[gnu::always_inline]] inline void product_block(const float* x, int64_t x_r, int64_t x_k, int64_t K, const float* y,
                                                 int64_t y_stride, int64_t n, float* out, int64_t out_stride) {
  int64_t c = 0;
  for (; c + 2 * W <= n; c += 2 * W) product_columns<R, W, true>(x, x_r, x_k, K, y, y_stride, c, out, out_stride);
  for (; c + W <= n; c += W) product_columns<R, W, false>(x, x_r, x_k, K, y, y_stride, c, out, out_stride);
  if constexpr (W > 8)
    for (; c + 8 <= n; c += 8) product_columns<R, 8, false>(x, x_r, x_k, K, y, y_stride, c, out, out_stride);
  for (; c < n; ++c)
    for (int64_t r = 0; r < R; ++r) {
      float sum = 0.0f;
      for (int64_t k = 0; k < K; ++k) sum += x[r * x_r + k * x_k] * y[k * y_stride + c];
      out[r * out_stride + c] = sum;
    }
}

// d (T, T) = the rows' dot products a[t] . bt[:, t2] for t2 < visible(t) and, when causal, on to
// the next multiple of 8 columns past the block's last visible one (within the row): the forward's
// exponentials run over whole vectors there, and the caller zeroes what a row does not see.
// a (T, hs) rows a_stride apart.
template <int64_t W>
[[gnu::always_inline]] inline void dots_all_rows(const float* a, int64_t a_stride, const float* bt, int64_t T,
                                                 int64_t hs, bool causal, float* d) {
  int64_t t0 = 0;
  for (; t0 + BLOCK_ROWS <= T; t0 += BLOCK_ROWS)
    product_block<BLOCK_ROWS, W>(a + t0 * a_stride, a_stride, 1, hs, bt, T,
                                 causal ? std::min(T, (t0 + BLOCK_ROWS + 7) / 8 * 8) : T, d + t0 * T, T);
  for (; t0 < T; ++t0)
    product_block<1, W>(a + t0 * a_stride, a_stride, 1, hs, bt, T, causal ? std::min(T, (t0 + 1 + 7) / 8 * 8) : T,
                        d + t0 * T, T);
}

// out[t] = sum over t2 < visible(t) of w[t, t2] * rows[t2], in t2 order: w (T, T), zero past each
// row's visible part; rows and out rows rows_stride / out_stride apart. A causal block of rows runs
// to its last row's visible part: the others add w = 0 times the rows they do not see, which leaves
// their sums as they are (x + 0 * y = x for finite y, as no such sum is -0).
template <int64_t W>
[[gnu::always_inline]] inline void combine_visible(const float* w, int64_t T, bool causal, const float* rows,
                                                   int64_t rows_stride, int64_t hs, float* out, int64_t out_stride) {
  int64_t t0 = 0;
  for (; t0 + BLOCK_ROWS <= T; t0 += BLOCK_ROWS)
    product_block<BLOCK_ROWS, W>(w + t0 * T, T, 1, causal ? t0 + BLOCK_ROWS : T, rows, rows_stride, hs,
                                 out + t0 * out_stride, out_stride);
  for (; t0 < T; ++t0)
    product_block<1, W>(w + t0 * T, 0, 1, causal ? t0 + 1 : T, rows, rows_stride, hs, out + t0 * out_stride,
                        out_stride);
}

// out[t2] = sum over the rows t that see t2 (causal: t >= t2) of w[t, t2] * rows[t], in t order:
// the transposed products dv = att^T dout and dk = dpre^T q (w zero where t does not see t2). A
// causal block of four tokens t2 starts at the rows its first token is seen by: the others first
// add w = 0 times rows that do not see them, which leaves their sums (from 0) as they are.
template <int64_t W>
[[gnu::always_inline]] inline void combine_seen_by(const float* w, int64_t T, bool causal, const float* rows,
                                                   int64_t rows_stride, int64_t hs, float* out, int64_t out_stride) {
  int64_t t0 = 0;
  for (; t0 + BLOCK_ROWS <= T; t0 += BLOCK_ROWS) {
    const int64_t first = causal ? t0 : 0;
    product_block<BLOCK_ROWS, W>(w + first * T + t0, 1, T, T - first, rows + first * rows_stride, rows_stride, hs,
                                 out + t0 * out_stride, out_stride);
  }
  for (; t0 < T; ++t0) {
    const int64_t first = causal ? t0 : 0;
    product_block<1, W>(w + first * T + t0, 0, T, T - first, rows + first * rows_stride, rows_stride, hs,
                        out + t0 * out_stride, out_stride);
  }
}

// dst (hs, T) = the hs channels of head h of part `part` (0 q, 1 k, 2 v) of the T rows of one
// sample's qkv (T, 3C): 8x8 tiles read transposed (contiguous loads of each token's channels,
// contiguous stores of each channel's tokens), the edges one at a time.
__attribute__((target("avx2"))) inline void transpose_head(const float* qkv_b, int64_t T, int64_t C, int64_t part,
                                                           int64_t h, int64_t hs, float* dst) {
  const float* src = qkv_b + part * C + h * hs;  // (T, hs), rows 3C apart
  const int64_t ld = 3 * C;
  const int64_t T8 = T / 8 * 8, hs8 = hs / 8 * 8;
  __m256 tile[8];
  for (int64_t t0 = 0; t0 < T8; t0 += 8)
    for (int64_t i0 = 0; i0 < hs8; i0 += 8) {
      load_tile_transposed(src + t0 * ld + i0, ld, tile);  // tile[j] lane g = src[t0 + g, i0 + j]
      for (int64_t j = 0; j < 8; ++j) _mm256_storeu_ps(dst + (i0 + j) * T + t0, tile[j]);
    }
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = t < T8 ? hs8 : 0; i < hs; ++i) dst[i * T + t] = src[t * ld + i];
}

}  // namespace qsync::attention_products
