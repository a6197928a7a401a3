// File: worker/tp/tp_block.cpp
// One shard's block arithmetic: cutting the shard, the attention partial with the KV cache, the
// MLP partial, layernorm and the FP32 projection GEMM (see tp_block.h).
#include "worker/tp/tp_block.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "kernels/gemm_registry.h"
#include "worker/layers/layernorm.h"
#include "worker/ops/cpu/vector_math.h"

namespace qsync {

TpBlockShard tp_block_shard(const BlockWeights& b, int64_t mlp_width, const std::vector<int>& heads, int slice,
                            int ranks) {
  const int64_t C = int64_t(b.ln1_gain.size()), H = b.heads, hs = C / H;
  TpBlockShard s;
  s.width = C;
  s.head_size = hs;
  s.local_heads = int64_t(heads.size());
  s.mlp_local = mlp_width / ranks;
  const int64_t Cl = s.local_heads * hs, Fl = s.mlp_local;
  s.qkv_weight.resize(size_t(3 * Cl * C));
  s.qkv_bias.resize(size_t(3 * Cl));
  s.proj_weight.resize(size_t(C * Cl));
  for (int64_t part = 0; part < 3; ++part)  // Q, K, V
    for (int64_t j = 0; j < s.local_heads; ++j)
      for (int64_t i = 0; i < hs; ++i) {
        const int64_t src = part * C + int64_t(heads[size_t(j)]) * hs + i;  // row of qkv_weight
        const int64_t dst = part * Cl + j * hs + i;
        std::copy_n(b.qkv_weight.begin() + src * C, C, s.qkv_weight.begin() + dst * C);
        s.qkv_bias[size_t(dst)] = b.qkv_bias[size_t(src)];
      }
  for (int64_t r = 0; r < C; ++r)
    for (int64_t j = 0; j < s.local_heads; ++j)
      std::copy_n(b.proj_weight.begin() + r * C + int64_t(heads[size_t(j)]) * hs, hs,
                  s.proj_weight.begin() + r * Cl + j * hs);
  const int64_t f0 = int64_t(slice) * Fl;
  s.fc1_weight.assign(b.fc1_weight.begin() + f0 * C, b.fc1_weight.begin() + (f0 + Fl) * C);
  s.fc1_bias.assign(b.fc1_bias.begin() + f0, b.fc1_bias.begin() + f0 + Fl);
  s.fc2_weight.resize(size_t(C * Fl));
  for (int64_t r = 0; r < C; ++r)
    std::copy_n(b.fc2_weight.begin() + r * mlp_width + f0, Fl, s.fc2_weight.begin() + r * Fl);
  return s;
}

void tp_block_shard_reset(TpBlockShard& s, int64_t batch, int64_t max_tokens) {
  const size_t n = size_t(batch * s.local_heads * max_tokens * s.head_size);
  s.k_cache.assign(n, 0.0f);
  s.v_cache.assign(n, 0.0f);
}

void tp_gemm_xwt(const float* x, const float* w, int64_t M, int64_t N, int64_t K, float* y, const float* bias) {
  GemmDesc d;
  d.m = M;
  d.n = N;
  d.k = K;
  d.a = GemmOperand{x, Precision::FP32, Transpose::NO, K};
  d.b = GemmOperand{w, Precision::FP32, Transpose::YES, K};
  d.c = y;
  d.ldc = N;
  d.beta = 0.0f;
  d.bias = bias;
  gemm_backend_for_host(gemm_signature(d)).gemm(d);
}

void tp_layernorm(const float* x, const float* g, const float* b, int64_t rows, int64_t C, float* y) {
  layernorm_rows(x, g, b, rows, C, y);
}

void tp_attention_partial(TpBlockShard& s, const float* x, int64_t batch, int64_t t_new, int64_t pos0,
                          int64_t max_tokens, float* y) {
  const int64_t C = s.width, hs = s.head_size, Hl = s.local_heads, Cl = Hl * hs, M = batch * t_new;
  std::vector<float> qkv(size_t(M * 3 * Cl));  // (M, 3 Cl): [Q | K | V] of the local heads
  tp_gemm_xwt(x, s.qkv_weight.data(), M, 3 * Cl, C, qkv.data(), s.qkv_bias.data());
  // Append the new keys and values: cache (B, Hl, T_max, hs).
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < Hl; ++h)
      for (int64_t t = 0; t < t_new; ++t) {
        const float* row = qkv.data() + (b * t_new + t) * 3 * Cl;
        const int64_t at = ((b * Hl + h) * max_tokens + pos0 + t) * hs;
        std::copy_n(row + Cl + h * hs, hs, s.k_cache.begin() + at);
        std::copy_n(row + 2 * Cl + h * hs, hs, s.v_cache.begin() + at);
      }
  std::vector<float> heads_out(size_t(M * Cl));  // (M, Cl): the local heads' outputs
  const float scale = 1.0f / std::sqrt(float(hs));
  const int64_t visible_max = pos0 + t_new;
#pragma omp parallel for collapse(2) schedule(static) if (batch * Hl * t_new * visible_max * hs > (1 << 16))
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < Hl; ++h) {
      std::vector<float> row(static_cast<size_t>(visible_max));  // (T) scores, then probabilities
      const float* keys = s.k_cache.data() + (b * Hl + h) * max_tokens * hs;
      const float* values = s.v_cache.data() + (b * Hl + h) * max_tokens * hs;
      for (int64_t t = 0; t < t_new; ++t) {
        const float* q = qkv.data() + (b * t_new + t) * 3 * Cl + h * hs;
        const int64_t visible = pos0 + t + 1;  // causal: positions 0..pos0+t
        float maxv = -std::numeric_limits<float>::infinity();
        for (int64_t t2 = 0; t2 < visible; ++t2) {
          const float* k = keys + t2 * hs;
          float dot = 0.0f;
          for (int64_t i = 0; i < hs; ++i) dot += q[i] * k[i];
          row[size_t(t2)] = dot * scale;
          maxv = std::max(maxv, row[size_t(t2)]);
        }
        float sum = 0.0f;
        for (int64_t t2 = 0; t2 < visible; ++t2) sum += (row[size_t(t2)] = std::exp(row[size_t(t2)] - maxv));
        const float inv = 1.0f / sum;
        for (int64_t t2 = 0; t2 < visible; ++t2) row[size_t(t2)] *= inv;
        float* o = heads_out.data() + (b * t_new + t) * Cl + h * hs;
        for (int64_t i = 0; i < hs; ++i) o[i] = 0.0f;
        for (int64_t t2 = 0; t2 < visible; ++t2) {
          const float* v = values + t2 * hs;
          for (int64_t i = 0; i < hs; ++i) o[i] += row[size_t(t2)] * v[i];
        }
      }
    }
  tp_gemm_xwt(heads_out.data(), s.proj_weight.data(), M, C, Cl, y);
}

void tp_mlp_partial(const TpBlockShard& s, const float* x, int64_t rows, float* z) {
  const int64_t C = s.width, Fl = s.mlp_local;
  std::vector<float> hidden(size_t(rows * Fl));  // (M, Fl)
  tp_gemm_xwt(x, s.fc1_weight.data(), rows, Fl, C, hidden.data(), s.fc1_bias.data());
  gelu_buffer(hidden.data(), hidden.data(), nullptr, int64_t(hidden.size()));  // the training GELU, in place
  tp_gemm_xwt(hidden.data(), s.fc2_weight.data(), rows, C, Fl, z);
}

}  // namespace qsync
