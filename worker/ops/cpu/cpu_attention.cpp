// File: worker/ops/cpu/cpu_attention.cpp
// CpuOps: the score part of attention (after llm.c's attention_forward/backward), FP32 over
// (batch, head) pairs; allow_tf32 changes nothing here (there are no TF32 units). The _ref
// functions are the plain loops (the oracle). CpuOps runs the same arithmetic in the same order
// with the dot products over head channels turned inside out: K (and V) of a (batch, head) pair
// transposed once into (hs, T), so each channel's products are added to a whole row of scores at
// once, in vector lanes, each score still summed over channels 0, 1, ..., hs-1 from 0; att v and
// the gradients are sums of rows kept in registers (dv and dk column by column over the rows t in
// the oracle's order, after the softmax gradients of every row are known). No sum is
// reassociated (and -ffp-contract=off fuses nothing), so the results are bit for bit the _ref's
// (and the engine's numbers those of the loops before: std::exp stays scalar, as libmvec's
// vector exp rounds differently).
#include "worker/ops/cpu/cpu_kernels.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "worker/ops/cpu_ops.h"

namespace qsync {

// att[b, h, t, :] = softmax(q k^T / sqrt(hs)) over the visible t2; out[b, t, h] = att v
void attention_forward_ref(const Tensor& qkv, const AttentionShape& s, Tensor& att, Tensor& out) {
  const int64_t B = s.batch, T = s.tokens, C = s.width, H = s.heads, hs = C / H;
  const bool causal = s.causal;
  const float scale = 1.0f / std::sqrt(float(hs));
  const float* qp = qkv.f32();
  float* ap = att.f32();
  float* op = out.f32();
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t) {
        const float* q = qp + (b * T + t) * 3 * C + h * hs;
        float* row = ap + ((b * H + h) * T + t) * T;  // (T)
        const int64_t visible = causal ? t + 1 : T;
        float maxv = -std::numeric_limits<float>::infinity();
        for (int64_t t2 = 0; t2 < visible; ++t2) {
          const float* k = qp + (b * T + t2) * 3 * C + C + h * hs;
          float dot = 0.0f;
          for (int64_t i = 0; i < hs; ++i) dot += q[i] * k[i];
          row[t2] = dot * scale;
          maxv = std::max(maxv, row[t2]);
        }
        float sum = 0.0f;
        for (int64_t t2 = 0; t2 < visible; ++t2) sum += (row[t2] = std::exp(row[t2] - maxv));
        const float inv = 1.0f / sum;
        for (int64_t t2 = 0; t2 < T; ++t2) row[t2] = t2 < visible ? row[t2] * inv : 0.0f;
        float* o = op + (b * T + t) * C + h * hs;
        for (int64_t i = 0; i < hs; ++i) o[i] = 0.0f;
        for (int64_t t2 = 0; t2 < visible; ++t2) {
          const float* v = qp + (b * T + t2) * 3 * C + 2 * C + h * hs;
          for (int64_t i = 0; i < hs; ++i) o[i] += row[t2] * v[i];
        }
      }
}

// datt = dout v^T; dv = att^T dout; dpre = softmax'(datt); dq = dpre k * scale; dk = dpre^T q * scale
void attention_backward_ref(const Tensor& qkv, const Tensor& att, const Tensor& dout, const AttentionShape& s, Tensor& dqkv) {
  const int64_t B = s.batch, T = s.tokens, C = s.width, H = s.heads, hs = C / H;
  const bool causal = s.causal;
  const float scale = 1.0f / std::sqrt(float(hs));
  std::fill(dqkv.f32(), dqkv.f32() + dqkv.numel(), 0.0f);
  const float* qp = qkv.f32();
  const float* ap = att.f32();
  const float* dop = dout.f32();
  float* dq = dqkv.f32();
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      std::vector<float> datt(static_cast<size_t>(T));  // (T)
      for (int64_t t = 0; t < T; ++t) {
        const float* row = ap + ((b * H + h) * T + t) * T;
        const float* g = dop + (b * T + t) * C + h * hs;
        const int64_t visible = causal ? t + 1 : T;
        // datt (T) and dv
        for (int64_t t2 = 0; t2 < visible; ++t2) {
          const float* v = qp + (b * T + t2) * 3 * C + 2 * C + h * hs;
          float* dv = dq + (b * T + t2) * 3 * C + 2 * C + h * hs;
          float sdot = 0.0f;
          for (int64_t i = 0; i < hs; ++i) {
            sdot += g[i] * v[i];
            dv[i] += row[t2] * g[i];
          }
          datt[size_t(t2)] = sdot;
        }
        // softmax backward: dpre = att * (datt - sum(att * datt))
        float dot = 0.0f;
        for (int64_t t2 = 0; t2 < visible; ++t2) dot += row[t2] * datt[size_t(t2)];
        const float* q = qp + (b * T + t) * 3 * C + h * hs;
        float* dqt = dq + (b * T + t) * 3 * C + h * hs;
        for (int64_t t2 = 0; t2 < visible; ++t2) {
          const float dpre = row[t2] * (datt[size_t(t2)] - dot) * scale;
          const float* k = qp + (b * T + t2) * 3 * C + C + h * hs;
          float* dk = dq + (b * T + t2) * 3 * C + C + h * hs;
          for (int64_t i = 0; i < hs; ++i) {
            dqt[i] += dpre * k[i];
            dk[i] += dpre * q[i];
          }
        }
      }
    }
}

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

// acc[t2] = sum over i of x[i] * yt[i, t2] for t2 < n, each sum from 0 over i = 0, 1, ... in
// order (yt: (hs, T)); eight t2 at a time in a register.
void channel_dots(const float* x, const float* yt, int64_t hs, int64_t T, int64_t n, float* acc) {
  int64_t t2 = 0;
  for (; t2 + 8 <= n; t2 += 8) {
    f32x8 sum = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t i = 0; i < hs; ++i) sum += x[i] * load8(yt + i * T + t2);
    store8(acc + t2, sum);
  }
  for (; t2 < n; ++t2) {
    float sum = 0.0f;
    for (int64_t i = 0; i < hs; ++i) sum += x[i] * yt[i * T + t2];
    acc[t2] = sum;
  }
}

// out[i] += sum over j < n of w[j * w_stride] * rows[j * stride + i] for i < hs, added in j
// order onto out's value; eight i at a time in a register.
void weighted_rows(const float* w, int64_t w_stride, int64_t n, const float* rows, int64_t stride, int64_t hs, float* out) {
  int64_t i = 0;
  for (; i + 8 <= hs; i += 8) {
    f32x8 sum = load8(out + i);
    for (int64_t j = 0; j < n; ++j) sum += w[j * w_stride] * load8(rows + j * stride + i);
    store8(out + i, sum);
  }
  for (; i < hs; ++i) {
    float sum = out[i];
    for (int64_t j = 0; j < n; ++j) sum += w[j * w_stride] * rows[j * stride + i];
    out[i] = sum;
  }
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
      float* kt = scratch(size_t(hs * T)).data();  // (hs, T)
      transpose_head(qp + b * T * 3 * C, T, C, 1, h, hs, kt);
      for (int64_t t = 0; t < T; ++t) {
        const float* q = qp + (b * T + t) * 3 * C + h * hs;
        float* row = ap + ((b * H + h) * T + t) * T;  // (T)
        const int64_t visible = causal ? t + 1 : T;
        channel_dots(q, kt, hs, T, visible, row);
        for (int64_t t2 = 0; t2 < visible; ++t2) row[t2] *= scale;
        // The maximum is exact in any order (a NaN score makes the whole row NaN either way).
        float maxv = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : maxv)
        for (int64_t t2 = 0; t2 < visible; ++t2) maxv = row[t2] > maxv ? row[t2] : maxv;
        float sum = 0.0f;  // std::exp and the sum in order, as the oracle
        for (int64_t t2 = 0; t2 < visible; ++t2) sum += (row[t2] = std::exp(row[t2] - maxv));
        const float inv = 1.0f / sum;
        for (int64_t t2 = 0; t2 < T; ++t2) row[t2] = t2 < visible ? row[t2] * inv : 0.0f;
        float* o = op + (b * T + t) * C + h * hs;
        for (int64_t i = 0; i < hs; ++i) o[i] = 0.0f;
        weighted_rows(row, 1, visible, qp + b * T * 3 * C + 2 * C + h * hs, 3 * C, hs, o);  // att v
      }
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
  fill_zero(dqkv);
  const float* qp = qkv.f32();
  const float* ap = att.f32();
  const float* dop = dout.f32();
  float* dq = dqkv.f32();
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      std::vector<float>& buffer = scratch(size_t(hs * T + T + T * T));
      float* vt = buffer.data();                  // (hs, T)
      float* datt = buffer.data() + hs * T;       // (T)
      float* dpre = buffer.data() + hs * T + T;   // (T, T): row t's softmax gradient
      transpose_head(qp + b * T * 3 * C, T, C, 2, h, hs, vt);
      const float* att_bh = ap + (b * H + h) * T * T;
      for (int64_t t = 0; t < T; ++t) {
        const float* row = att_bh + t * T;
        const float* g = dop + (b * T + t) * C + h * hs;
        const int64_t visible = causal ? t + 1 : T;
        channel_dots(g, vt, hs, T, visible, datt);  // datt (T)
        // softmax backward: dpre = att * (datt - sum(att * datt))
        float dot = 0.0f;
        for (int64_t t2 = 0; t2 < visible; ++t2) dot += row[t2] * datt[t2];
        float* dp = dpre + t * T;
        for (int64_t t2 = 0; t2 < visible; ++t2) dp[t2] = row[t2] * (datt[t2] - dot) * scale;
        weighted_rows(dp, 1, visible, qp + b * T * 3 * C + C + h * hs, 3 * C, hs, dq + (b * T + t) * 3 * C + h * hs);  // dq
      }
      // dv[t2] = sum over t of att[t, t2] dout[t], dk[t2] = sum over t of dpre[t, t2] q[t]: the
      // oracle adds them row t after row t, so here column t2 by column t2 over t in order.
      for (int64_t t2 = 0; t2 < T; ++t2) {
        const int64_t first = causal ? t2 : 0;  // the rows t that see t2
        float* dv = dq + (b * T + t2) * 3 * C + 2 * C + h * hs;
        float* dk = dq + (b * T + t2) * 3 * C + C + h * hs;
        weighted_rows(att_bh + first * T + t2, T, T - first, dop + (b * T + first) * C + h * hs, C, hs, dv);
        weighted_rows(dpre + first * T + t2, T, T - first, qp + (b * T + first) * 3 * C + h * hs, 3 * C, hs, dk);
      }
    }
}

}  // namespace qsync
