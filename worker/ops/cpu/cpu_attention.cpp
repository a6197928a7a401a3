// File: worker/ops/cpu/cpu_attention.cpp
// CpuOps: the score part of attention (after llm.c's attention_forward/backward), FP32 over
// (batch, head) pairs; allow_tf32 changes nothing here (there are no TF32 units). The oracle is
// the plain loops of cpu_attention_ref.cpp. Every product here is a small matrix product over a
// (batch, head) pair: scores = q k^T and datt = dout v^T over the head's channels (K and V
// transposed once into (hs, T)), att v and dq = dpre k over the visible tokens, dv = att^T dout
// and dk = dpre^T q over the rows that see a token. Each runs as a register block: four output
// rows by sixteen columns (eight independent vector sums) per pass over the summed index, which
// keeps both vector units busy instead of waiting on one add after another. Every output is
// still summed from 0 over its index in the oracle's order, and the rows' sums (of
// exponentials, of att * datt) run eight rows side by side, each in its own order; no sum is
// reassociated (-ffp-contract=off fuses nothing); where a block's rows see different tokens,
// the others add exact zeros, which needs att as attention_forward leaves it (exact zeros where
// a row does not see a token) and finite q, k, v and dout (0 * inf would be NaN where the oracle
// never multiplies). So for finite inputs the backward is bit for bit the oracle's;
// the forward differs only by its exponentials: libmvec's vector exp (the oracle: std::exp;
// they differ by at most a few ulp).
#include "worker/ops/cpu/cpu_kernels.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "worker/ops/cpu/tile_transpose.h"
#include "worker/ops/cpu/vector_math.h"
#include "worker/ops/cpu_ops.h"

namespace qsync {
namespace {

// dst (hs, T) = the hs channels of head h of part `part` (0 q, 1 k, 2 v) of the T rows of one
// sample's qkv (T, 3C).
void transpose_head(const float* qkv_b, int64_t T, int64_t C, int64_t part, int64_t h, int64_t hs, float* dst) {
  for (int64_t t = 0; t < T; ++t) {
    const float* src = qkv_b + t * 3 * C + part * C + h * hs;
    for (int64_t i = 0; i < hs; ++i) dst[i * T + t] = src[i];
  }
}

// Eight floats in one vector register (GCC/clang vector extension; unaligned loads and stores).
typedef float f32x8 __attribute__((vector_size(32), aligned(4)));
inline f32x8 load8(const float* p) { return *reinterpret_cast<const f32x8*>(p); }
inline void store8(float* p, f32x8 v) { *reinterpret_cast<f32x8*>(p) = v; }

// The output rows of one register block.
constexpr int64_t BLOCK_ROWS = 4;

// out[r, c] = sum over i < hs of a[r, i] * bt[i, c], for r < R and c < n, each sum from 0 over
// i = 0, 1, ... in order. a: rows a_stride apart; bt: (hs, .) rows bt_stride apart; out: rows
// out_stride apart. Sixteen columns of R rows at a time, then eight, then one.
template <int64_t R>
void dots_block(const float* a, int64_t a_stride, const float* bt, int64_t bt_stride, int64_t hs, int64_t n,
                float* out, int64_t out_stride) {
  int64_t c = 0;
  for (; c + 16 <= n; c += 16) {
    f32x8 lo[R], hi[R];
    for (int64_t r = 0; r < R; ++r) lo[r] = hi[r] = f32x8{0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t i = 0; i < hs; ++i) {
      const f32x8 y0 = load8(bt + i * bt_stride + c), y1 = load8(bt + i * bt_stride + c + 8);
      for (int64_t r = 0; r < R; ++r) {
        const float x = a[r * a_stride + i];
        lo[r] += x * y0;
        hi[r] += x * y1;
      }
    }
    for (int64_t r = 0; r < R; ++r) {
      store8(out + r * out_stride + c, lo[r]);
      store8(out + r * out_stride + c + 8, hi[r]);
    }
  }
  for (; c + 8 <= n; c += 8) {
    f32x8 acc[R];
    for (int64_t r = 0; r < R; ++r) acc[r] = f32x8{0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t i = 0; i < hs; ++i) {
      const f32x8 y = load8(bt + i * bt_stride + c);
      for (int64_t r = 0; r < R; ++r) acc[r] += a[r * a_stride + i] * y;
    }
    for (int64_t r = 0; r < R; ++r) store8(out + r * out_stride + c, acc[r]);
  }
  for (; c < n; ++c)
    for (int64_t r = 0; r < R; ++r) {
      float sum = 0.0f;
      for (int64_t i = 0; i < hs; ++i) sum += a[r * a_stride + i] * bt[i * bt_stride + c];
      out[r * out_stride + c] = sum;
    }
}

// out[r, i] = sum over j < n of w[r * w_r + j * w_j] * rows[j * rows_stride + i], for r < R and
// i < hs, each from 0 in j order (out rows out_stride apart; the oracle adds onto zeros, the same
// sums). Sixteen channels of R rows at a time, then eight, then one.
template <int64_t R>
void combine_block(const float* w, int64_t w_r, int64_t w_j, int64_t n, const float* rows, int64_t rows_stride,
                   int64_t hs, float* out, int64_t out_stride) {
  int64_t i = 0;
  for (; i + 16 <= hs; i += 16) {
    f32x8 lo[R], hi[R];
    for (int64_t r = 0; r < R; ++r) lo[r] = hi[r] = f32x8{0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t j = 0; j < n; ++j) {
      const f32x8 y0 = load8(rows + j * rows_stride + i), y1 = load8(rows + j * rows_stride + i + 8);
      for (int64_t r = 0; r < R; ++r) {
        const float x = w[r * w_r + j * w_j];
        lo[r] += x * y0;
        hi[r] += x * y1;
      }
    }
    for (int64_t r = 0; r < R; ++r) {
      store8(out + r * out_stride + i, lo[r]);
      store8(out + r * out_stride + i + 8, hi[r]);
    }
  }
  for (; i + 8 <= hs; i += 8) {
    f32x8 acc[R];
    for (int64_t r = 0; r < R; ++r) acc[r] = f32x8{0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t j = 0; j < n; ++j) {
      const f32x8 y = load8(rows + j * rows_stride + i);
      for (int64_t r = 0; r < R; ++r) acc[r] += w[r * w_r + j * w_j] * y;
    }
    for (int64_t r = 0; r < R; ++r) store8(out + r * out_stride + i, acc[r]);
  }
  for (; i < hs; ++i)
    for (int64_t r = 0; r < R; ++r) {
      float sum = 0.0f;
      for (int64_t j = 0; j < n; ++j) sum += w[r * w_r + j * w_j] * rows[j * rows_stride + i];
      out[r * out_stride + i] = sum;
    }
}

// d (T, T) = the rows' dot products a[t] . bt[:, t2] for t2 < visible(t) and, when causal, on
// to the next multiple of 8 columns past the block's last visible one (within the row): the
// forward's exponentials run over whole vectors there, and the caller zeroes what a row does not
// see. a (T, hs) rows a_stride apart.
void dots_all_rows(const float* a, int64_t a_stride, const float* bt, int64_t T, int64_t hs, bool causal, float* d) {
  int64_t t0 = 0;
  for (; t0 + BLOCK_ROWS <= T; t0 += BLOCK_ROWS)
    dots_block<BLOCK_ROWS>(a + t0 * a_stride, a_stride, bt, T, hs,
                           causal ? std::min(T, (t0 + BLOCK_ROWS + 7) / 8 * 8) : T, d + t0 * T, T);
  for (; t0 < T; ++t0)
    dots_block<1>(a + t0 * a_stride, a_stride, bt, T, hs, causal ? std::min(T, (t0 + 1 + 7) / 8 * 8) : T, d + t0 * T, T);
}

// out[t] = sum over t2 < visible(t) of w[t, t2] * rows[t2], in t2 order: w (T, T), zero past
// each row's visible part; rows and out rows rows_stride / out_stride apart. A causal block of
// rows runs to its last row's visible part: the others add w = 0 times the rows they do not see,
// which leaves their sums as they are (x + 0 * y = x for finite y, as no such sum is -0).
void combine_visible(const float* w, int64_t T, bool causal, const float* rows, int64_t rows_stride, int64_t hs,
                     float* out, int64_t out_stride) {
  int64_t t0 = 0;
  for (; t0 + BLOCK_ROWS <= T; t0 += BLOCK_ROWS)
    combine_block<BLOCK_ROWS>(w + t0 * T, T, 1, causal ? t0 + BLOCK_ROWS : T, rows, rows_stride, hs,
                              out + t0 * out_stride, out_stride);
  for (; t0 < T; ++t0)
    combine_block<1>(w + t0 * T, 0, 1, causal ? t0 + 1 : T, rows, rows_stride, hs, out + t0 * out_stride, out_stride);
}

// out[t2] = sum over the rows t that see t2 (causal: t >= t2) of w[t, t2] * rows[t], in t order:
// the transposed products dv = att^T dout and dk = dpre^T q (w zero where t does not see t2). A
// causal block of four tokens t2 starts at the rows its first token is seen by: the others first
// add w = 0 times rows that do not see them, which leaves their sums (from 0) as they are.
void combine_seen_by(const float* w, int64_t T, bool causal, const float* rows, int64_t rows_stride, int64_t hs,
                     float* out, int64_t out_stride) {
  int64_t t0 = 0;
  for (; t0 + BLOCK_ROWS <= T; t0 += BLOCK_ROWS) {
    const int64_t first = causal ? t0 : 0;
    combine_block<BLOCK_ROWS>(w + first * T + t0, 1, T, T - first, rows + first * rows_stride, rows_stride, hs,
                              out + t0 * out_stride, out_stride);
  }
  for (; t0 < T; ++t0) {
    const int64_t first = causal ? t0 : 0;
    combine_block<1>(w + first * T + t0, 0, T, T - first, rows + first * rows_stride, rows_stride, hs,
                     out + t0 * out_stride, out_stride);
  }
}

// Rows of a (T, T) block are summed ROW_GROUP at a time side by side, each row's sum still over
// t2 = 0, 1, ... in order: a lone row's sum waits on every add before it.
constexpr int64_t ROW_GROUP = 8;

// row_sums for a group of 8 rows: 8x8 tiles read transposed, one row per lane, so each lane adds
// its row's entries in t2 order (the scalar loop's adds), from contiguous loads.
__attribute__((target("avx2"))) void row_sums8(const float* a, const float* b, int64_t T, int64_t n, float* sums) {
  __m256 ta[8], tb[8];
  __m256 acc = _mm256_setzero_ps();
  int64_t t2 = 0;
  for (; t2 + 8 <= n; t2 += 8) {
    load_tile_transposed(a + t2, T, ta);
    if (b == nullptr) {
      for (int j = 0; j < 8; ++j) acc = _mm256_add_ps(acc, ta[j]);
    } else {
      load_tile_transposed(b + t2, T, tb);
      for (int j = 0; j < 8; ++j) acc = _mm256_add_ps(acc, _mm256_mul_ps(ta[j], tb[j]));
    }
  }
  _mm256_storeu_ps(sums, acc);
  for (; t2 < n; ++t2)
    for (int g = 0; g < 8; ++g) sums[g] += b == nullptr ? a[g * T + t2] : a[g * T + t2] * b[g * T + t2];
}

// sums[g] = sum over t2 < n of a[g * T + t2] (times b[g * T + t2] when b is given), for g < G,
// each from 0 in t2 order. Past a row's visible part its entries are zeros (adding +0 to these
// sums, which are never -0, changes nothing).
template <int64_t G>
void row_sums(const float* a, const float* b, int64_t T, int64_t n, float* sums) {
  if constexpr (G == 8) {
    row_sums8(a, b, T, n, sums);
    return;
  }
  float acc[G] = {};
  if (b == nullptr)
    for (int64_t t2 = 0; t2 < n; ++t2)
      for (int64_t g = 0; g < G; ++g) acc[g] += a[g * T + t2];
  else
    for (int64_t t2 = 0; t2 < n; ++t2)
      for (int64_t g = 0; g < G; ++g) acc[g] += a[g * T + t2] * b[g * T + t2];
  for (int64_t g = 0; g < G; ++g) sums[g] = acc[g];
}

// sums[t] for every row t of a (T, T) block, with n(t) = the longest visible part in t's group.
void block_row_sums(const float* a, const float* b, int64_t T, bool causal, float* sums) {
  int64_t t0 = 0;
  for (; t0 + ROW_GROUP <= T; t0 += ROW_GROUP)
    row_sums<ROW_GROUP>(a + t0 * T, b ? b + t0 * T : nullptr, T, causal ? t0 + ROW_GROUP : T, sums + t0);
  for (; t0 < T; ++t0) row_sums<1>(a + t0 * T, b ? b + t0 * T : nullptr, T, causal ? t0 + 1 : T, sums + t0);
}

std::vector<float>& scratch(size_t n) {
  thread_local std::vector<float> buffer;  // reused across calls: no allocation in the steady state
  if (buffer.size() < n) buffer.resize(n);
  return buffer;
}

}  // namespace

// att[b, h, t, :] = softmax(q k^T / sqrt(hs)) over the visible t2; out[b, t, h] = att v
void CpuOps::attention_forward(const Tensor& qkv, const AttentionShape& s, bool allow_tf32, Tensor& att, Tensor& out,
                               StepContext& ctx, const std::string& layer) {
  (void)allow_tf32;
  (void)ctx;
  (void)layer;
  const int64_t B = s.batch, T = s.tokens, C = s.width, H = s.heads, hs = C / H;
  const bool causal = s.causal;
  const float scale = 1.0f / std::sqrt(float(hs));
  const float* qp = qkv.f32();
  float* ap = att.f32();
  float* op = out.f32();
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      std::vector<float>& buffer = scratch(size_t(hs * T + T));
      float* kt = buffer.data();             // (hs, T)
      float* sums = buffer.data() + hs * T;  // (T): each row's sum of exponentials
      const float* qkv_b = qp + b * T * 3 * C;  // (T, 3C)
      transpose_head(qkv_b, T, C, 1, h, hs, kt);
      float* att_bh = ap + (b * H + h) * T * T;  // (T, T)
      dots_all_rows(qkv_b + h * hs, 3 * C, kt, T, hs, causal, att_bh);  // q k^T
      for (int64_t t = 0; t < T; ++t) {
        float* row = att_bh + t * T;  // (T)
        const int64_t visible = causal ? t + 1 : T;
        for (int64_t t2 = 0; t2 < visible; ++t2) row[t2] *= scale;
        // The maximum is exact in any order (a NaN score makes the whole row NaN either way).
        float maxv = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : maxv)
        for (int64_t t2 = 0; t2 < visible; ++t2) maxv = row[t2] > maxv ? row[t2] : maxv;
        for (int64_t t2 = 0; t2 < visible; ++t2) row[t2] -= maxv;
        // libmvec's vector exp (the oracle: std::exp) over whole vectors where the row has room,
        // the scalar std::exp for a last few past a multiple of 8 (entries past the visible part
        // hold finite scores from dots_all_rows and are zeroed next).
        exp_buffer(row, row, std::min(T, (visible + 7) / 8 * 8));
        for (int64_t t2 = visible; t2 < T; ++t2) row[t2] = 0.0f;
      }
      block_row_sums(att_bh, nullptr, T, causal, sums);
      float* out_bh = op + b * T * C + h * hs;  // (T, hs), rows C apart
      for (int64_t t = 0; t < T; ++t) {
        float* row = att_bh + t * T;
        const float inv = 1.0f / sums[t];
        for (int64_t t2 = 0, visible = causal ? t + 1 : T; t2 < visible; ++t2) row[t2] *= inv;  // the rest is 0
      }
      combine_visible(att_bh, T, causal, qkv_b + 2 * C + h * hs, 3 * C, hs, out_bh, C);  // att v
    }
}

// datt = dout v^T; dv = att^T dout; dpre = softmax'(datt); dq = dpre k * scale; dk = dpre^T q * scale
void CpuOps::attention_backward(const Tensor& qkv, const Tensor& att, const Tensor& dout, const AttentionShape& s,
                                bool allow_tf32, Tensor& dqkv, StepContext& ctx, const std::string& layer) {
  (void)allow_tf32;
  (void)ctx;
  (void)layer;
  const int64_t B = s.batch, T = s.tokens, C = s.width, H = s.heads, hs = C / H;
  const bool causal = s.causal;
  const float scale = 1.0f / std::sqrt(float(hs));
  // Every entry of dqkv is written once below (q, k and v parts of every head and token).
  const float* qp = qkv.f32();
  const float* ap = att.f32();
  const float* dop = dout.f32();
  float* dqkv_p = dqkv.f32();
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      std::vector<float>& buffer = scratch(size_t(hs * T + T + T * T));
      float* vt = buffer.data();                 // (hs, T)
      float* dots = buffer.data() + hs * T;      // (T): each row's sum(att * datt)
      float* dpre = buffer.data() + hs * T + T;  // (T, T): datt, then the softmax gradient
      const float* qkv_b = qp + b * T * 3 * C;   // (T, 3C)
      const float* dout_bh = dop + b * T * C + h * hs;  // (T, hs), rows C apart
      float* dqkv_b = dqkv_p + b * T * 3 * C;    // (T, 3C)
      transpose_head(qkv_b, T, C, 2, h, hs, vt);
      const float* att_bh = ap + (b * H + h) * T * T;
      dots_all_rows(dout_bh, C, vt, T, hs, causal, dpre);  // datt = dout v^T
      for (int64_t t = 0; t < T; ++t)
        for (int64_t t2 = causal ? t + 1 : T; t2 < T; ++t2) dpre[t * T + t2] = 0.0f;
      block_row_sums(att_bh, dpre, T, causal, dots);
      for (int64_t t = 0; t < T; ++t) {  // softmax backward: dpre = att * (datt - sum(att * datt))
        const float* row = att_bh + t * T;
        float* dp = dpre + t * T;
        for (int64_t t2 = 0, visible = causal ? t + 1 : T; t2 < visible; ++t2)
          dp[t2] = row[t2] * (dp[t2] - dots[t]) * scale;
      }
      combine_visible(dpre, T, causal, qkv_b + C + h * hs, 3 * C, hs, dqkv_b + h * hs, 3 * C);      // dq = dpre k
      combine_seen_by(att_bh, T, causal, dout_bh, C, hs, dqkv_b + 2 * C + h * hs, 3 * C);          // dv = att^T dout
      combine_seen_by(dpre, T, causal, qkv_b + h * hs, 3 * C, hs, dqkv_b + C + h * hs, 3 * C);      // dk = dpre^T q
    }
}

}  // namespace qsync
