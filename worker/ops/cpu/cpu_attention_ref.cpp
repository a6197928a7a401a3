// File: worker/ops/cpu/cpu_attention_ref.cpp
// Attention's score part as plain loops (after llm.c's attention_forward/backward): the oracle
// of CpuOps::attention_forward / attention_backward (cpu_attention.cpp) in tests.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "worker/ops/cpu/cpu_kernels.h"

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

}  // namespace qsync
