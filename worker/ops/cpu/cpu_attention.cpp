// File: worker/ops/cpu/cpu_attention.cpp
// CpuOps: the score part of attention (after llm.c's attention_forward/backward), FP32 over
// (batch, head) pairs; allow_tf32 changes nothing here (there are no TF32 units). The oracle is
// the plain loops of cpu_attention_ref.cpp. Every product here is a small matrix product over a
// (batch, head) pair: scores = q k^T and datt = dout v^T over the head's channels (K and V
// transposed once into (hs, T)), att v and dq = dpre k over the visible tokens, dv = att^T dout
// and dk = dpre^T q over the rows that see a token (attention_products.h: register blocks of
// four output rows, eight lanes wide on AVX2 classes and sixteen on AVX-512 ones, which keep
// the vector units busy instead of waiting on one add after another). Every output is
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

#include "kernels/cpu/simd_dispatch.h"
#include "worker/ops/cpu/attention_products.h"
#include "worker/ops/cpu/tile_transpose.h"
#include "worker/ops/cpu/vector_math.h"
#include "worker/ops/cpu_ops.h"

namespace qsync {
namespace {

using namespace attention_products;

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

// The sizes of one attention call, and the scale of its scores.
struct PairShape {
  int64_t T, C, H, hs;
  bool causal;
  float scale;
};

PairShape pair_shape(const AttentionShape& s) {
  const int64_t hs = s.width / s.heads;
  return {s.tokens, s.width, s.heads, hs, s.causal, 1.0f / std::sqrt(float(hs))};
}

// One (sample, head) pair of the forward: att_bh (T, T) = softmax(q k^T * scale) over the visible
// tokens, out_bh (T, hs) rows C apart = att v. qkv_b: the sample's (T, 3C).
template <int64_t W>
[[gnu::always_inline]] inline void forward_pair(const PairShape& p, const float* qkv_b, int64_t h, float* att_bh,
                                                float* out_bh) {
  const int64_t T = p.T, C = p.C, hs = p.hs;
  const bool causal = p.causal;
  std::vector<float>& buffer = scratch(size_t(hs * T + T));
  float* kt = buffer.data();             // (hs, T)
  float* sums = buffer.data() + hs * T;  // (T): each row's sum of exponentials
  transpose_head(qkv_b, T, C, 1, h, hs, kt);
  dots_all_rows<W>(qkv_b + h * hs, 3 * C, kt, T, hs, causal, att_bh);  // q k^T
  for (int64_t t = 0; t < T; ++t) {
    float* row = att_bh + t * T;  // (T)
    const int64_t visible = causal ? t + 1 : T;
    for (int64_t t2 = 0; t2 < visible; ++t2) row[t2] *= p.scale;
    // The maximum is exact in any order (a NaN score makes the whole row NaN either way).
    float maxv = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : maxv)
    for (int64_t t2 = 0; t2 < visible; ++t2) maxv = row[t2] > maxv ? row[t2] : maxv;
    for (int64_t t2 = 0; t2 < visible; ++t2) row[t2] -= maxv;
    // libmvec's vector exp (the oracle: std::exp) over whole vectors where the row has room, the
    // scalar std::exp for a last few past a multiple of 8 (entries past the visible part hold
    // finite scores from dots_all_rows and are zeroed next).
    exp_buffer(row, row, std::min(T, (visible + 7) / 8 * 8));
    for (int64_t t2 = visible; t2 < T; ++t2) row[t2] = 0.0f;
  }
  block_row_sums(att_bh, nullptr, T, causal, sums);
  for (int64_t t = 0; t < T; ++t) {
    float* row = att_bh + t * T;
    const float inv = 1.0f / sums[t];
    for (int64_t t2 = 0, visible = causal ? t + 1 : T; t2 < visible; ++t2) row[t2] *= inv;  // the rest is 0
  }
  combine_visible<W>(att_bh, T, causal, qkv_b + 2 * C + h * hs, 3 * C, hs, out_bh, C);  // att v
}

// One (sample, head) pair of the backward: the q, k and v parts of head h in dqkv_b (T, 3C) from
// dout_bh (T, hs) rows C apart and att_bh (T, T).
template <int64_t W>
[[gnu::always_inline]] inline void backward_pair(const PairShape& p, const float* qkv_b, int64_t h, const float* att_bh,
                                                 const float* dout_bh, float* dqkv_b) {
  const int64_t T = p.T, C = p.C, hs = p.hs;
  const bool causal = p.causal;
  std::vector<float>& buffer = scratch(size_t(hs * T + T + T * T));
  float* vt = buffer.data();                 // (hs, T)
  float* dots = buffer.data() + hs * T;      // (T): each row's sum(att * datt)
  float* dpre = buffer.data() + hs * T + T;  // (T, T): datt, then the softmax gradient
  transpose_head(qkv_b, T, C, 2, h, hs, vt);
  dots_all_rows<W>(dout_bh, C, vt, T, hs, causal, dpre);  // datt = dout v^T
  for (int64_t t = 0; t < T; ++t)
    for (int64_t t2 = causal ? t + 1 : T; t2 < T; ++t2) dpre[t * T + t2] = 0.0f;
  block_row_sums(att_bh, dpre, T, causal, dots);
  for (int64_t t = 0; t < T; ++t) {  // softmax backward: dpre = att * (datt - sum(att * datt))
    const float* row = att_bh + t * T;
    float* dp = dpre + t * T;
    for (int64_t t2 = 0, visible = causal ? t + 1 : T; t2 < visible; ++t2)
      dp[t2] = row[t2] * (dp[t2] - dots[t]) * p.scale;
  }
  combine_visible<W>(dpre, T, causal, qkv_b + C + h * hs, 3 * C, hs, dqkv_b + h * hs, 3 * C);  // dq = dpre k
  combine_seen_by<W>(att_bh, T, causal, dout_bh, C, hs, dqkv_b + 2 * C + h * hs, 3 * C);       // dv = att^T dout
  combine_seen_by<W>(dpre, T, causal, qkv_b + h * hs, 3 * C, hs, dqkv_b + C + h * hs, 3 * C);  // dk = dpre^T q
}

// Each pair's kernels compiled for one ISA: eight lanes (the AVX2 baseline) or sixteen.
void forward_pair_avx2(const PairShape& p, const float* qkv_b, int64_t h, float* att_bh, float* out_bh) {
  forward_pair<8>(p, qkv_b, h, att_bh, out_bh);
}
QSYNC_TARGET_AVX512 void forward_pair_avx512(const PairShape& p, const float* qkv_b, int64_t h, float* att_bh,
                                             float* out_bh) {
  forward_pair<16>(p, qkv_b, h, att_bh, out_bh);
}
void backward_pair_avx2(const PairShape& p, const float* qkv_b, int64_t h, const float* att_bh, const float* dout_bh,
                        float* dqkv_b) {
  backward_pair<8>(p, qkv_b, h, att_bh, dout_bh, dqkv_b);
}
QSYNC_TARGET_AVX512 void backward_pair_avx512(const PairShape& p, const float* qkv_b, int64_t h, const float* att_bh,
                                              const float* dout_bh, float* dqkv_b) {
  backward_pair<16>(p, qkv_b, h, att_bh, dout_bh, dqkv_b);
}

}  // namespace

// att[b, h, t, :] = softmax(q k^T / sqrt(hs)) over the visible t2; out[b, t, h] = att v
void CpuOps::attention_forward(const Tensor& qkv, const AttentionShape& s, bool allow_tf32, Tensor& att, Tensor& out,
                               StepContext& ctx, const std::string& layer) {
  (void)allow_tf32;
  (void)ctx;
  (void)layer;
  const PairShape p = pair_shape(s);
  const int64_t B = s.batch, T = p.T, C = p.C, H = p.H, hs = p.hs;
  const auto pair = simd::active_path() == simd::Path::AVX512 ? forward_pair_avx512 : forward_pair_avx2;
  const float* qp = qkv.f32();
  float* ap = att.f32();
  float* op = out.f32();
#pragma omp parallel for schedule(static)
  for (int64_t bh = 0; bh < B * H; ++bh) {
    const int64_t b = bh / H, h = bh % H;
    pair(p, qp + b * T * 3 * C, h, ap + bh * T * T, op + b * T * C + h * hs);
  }
}

// datt = dout v^T; dv = att^T dout; dpre = softmax'(datt); dq = dpre k * scale; dk = dpre^T q * scale
void CpuOps::attention_backward(const Tensor& qkv, const Tensor& att, const Tensor& dout, const AttentionShape& s,
                                bool allow_tf32, Tensor& dqkv, StepContext& ctx, const std::string& layer) {
  (void)allow_tf32;
  (void)ctx;
  (void)layer;
  const PairShape p = pair_shape(s);
  const int64_t B = s.batch, T = p.T, C = p.C, H = p.H, hs = p.hs;
  const auto pair = simd::active_path() == simd::Path::AVX512 ? backward_pair_avx512 : backward_pair_avx2;
  // Every entry of dqkv is written once (q, k and v parts of every head and token).
  const float* qp = qkv.f32();
  const float* ap = att.f32();
  const float* dop = dout.f32();
  float* dqkv_p = dqkv.f32();
#pragma omp parallel for schedule(static)
  for (int64_t bh = 0; bh < B * H; ++bh) {
    const int64_t b = bh / H, h = bh % H;
    pair(p, qp + b * T * 3 * C, h, ap + bh * T * T, dop + b * T * C + h * hs, dqkv_p + b * T * 3 * C);
  }
}

}  // namespace qsync
