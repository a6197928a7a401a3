// File: worker/layers/attention.cpp
// Attention forward and backward (the score part after llm.c's attention_forward/backward).
#include "worker/layers/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "worker/precision_ops.h"

namespace qsync {

AttentionLayer::AttentionLayer(const LayerDesc& d, MemoryAccount* memory)
    : Layer(d), heads_(d.heads), causal_(d.causal) {
  if (d.children.size() != 2)
    throw std::invalid_argument("attention layer '" + d.name + "' needs two children (qkv, proj)");
  const int64_t width = d.children[0].out / 3;  // A: the heads' width
  if (d.heads < 1 || d.children[0].out % 3 != 0 || width % d.heads != 0 || d.children[1].in_shape.empty() ||
      d.children[1].in_shape.back() != width)
    throw std::invalid_argument("attention layer '" + d.name + "': qkv out " + std::to_string(d.children[0].out) +
                                " must be 3 * heads * head size for " + std::to_string(d.heads) +
                                " heads, and proj must take the heads' width (qkv out / 3) as input");
  qkv_ = std::make_unique<LinearLayer>(d.children[0], memory);
  proj_ = std::make_unique<LinearLayer>(d.children[1], memory);
}

void AttentionLayer::collect_parameters(std::vector<Parameter*>& out) {
  qkv_->collect_parameters(out);
  proj_->collect_parameters(out);
}
void AttentionLayer::init_parameters(std::mt19937_64& rng) {
  qkv_->init_parameters(rng);
  proj_->init_parameters(rng);
}
void AttentionLayer::apply_plan(const RankPlan& plan) {
  qkv_->apply_plan(plan);
  proj_->apply_plan(plan);
}
int64_t AttentionLayer::saved_bytes() const {
  return qkv_->saved_bytes() + proj_->saved_bytes() + (qkv_saved_.defined() ? qkv_saved_.bytes() : 0) +
         (att_saved_.defined() ? att_saved_.bytes() : 0);
}

// ---------------------------------------------------------------------------------------------
// forward

Tensor AttentionLayer::forward(const Tensor& x, StepContext& ctx) {
  const int64_t B = x.dim(0), T = x.dim(1);
  const Tensor qkv = qkv_->forward(x, ctx);  // (B, T, 3C): C here is the heads' width A
  const int64_t C = qkv.dim(2) / 3, H = heads_, hs = C / H;
  Tensor att = Tensor::empty({B, H, T, T}, Precision::FP32, ctx.memory, name() + " attention");
  Tensor out = Tensor::empty({B, T, C}, Precision::FP32, ctx.memory, name() + " heads output");
  const float scale = 1.0f / std::sqrt(float(hs));
  const float* qp = qkv.f32();
  float* ap = att.f32();
  float* op = out.f32();
  {
    OpClock clock(ctx, name() + ".scores_forward");
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t t = 0; t < T; ++t) {
          const float* q = qp + (b * T + t) * 3 * C + h * hs;
          float* row = ap + ((b * H + h) * T + t) * T;  // (T)
          const int64_t visible = causal_ ? t + 1 : T;
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
  Tensor y = proj_->forward(out, ctx);
  if (ctx.training) {
    qkv_saved_ = qkv;
    att_saved_ = att;
  }
  return y;
}

// backward: dout = proj^T dy; datt = dout v^T; dv = att^T dout; dpre = softmax'(datt);
// dq = dpre k * scale; dk = dpre^T q * scale; dx = qkv^T dqkv

Tensor AttentionLayer::backward(const Tensor& dy, StepContext& ctx) {
  if (!qkv_saved_.defined()) throw std::logic_error("layer '" + name() + "': backward without a training forward");
  const Tensor dout = proj_->backward(dy, ctx);  // (B, T, C)
  const int64_t B = dout.dim(0), T = dout.dim(1), C = dout.dim(2), H = heads_, hs = C / H;
  const float scale = 1.0f / std::sqrt(float(hs));
  Tensor dqkv = Tensor::zeros({B, T, 3 * C}, Precision::FP32, ctx.memory, name() + " qkv gradient");
  const float* qp = qkv_saved_.f32();
  const float* ap = att_saved_.f32();
  const float* dop = dout.f32();
  float* dq = dqkv.f32();
  {
    OpClock clock(ctx, name() + ".scores_backward");
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h) {
        std::vector<float> datt(static_cast<size_t>(T));  // (T)
        for (int64_t t = 0; t < T; ++t) {
          const float* row = ap + ((b * H + h) * T + t) * T;
          const float* g = dop + (b * T + t) * C + h * hs;
          const int64_t visible = causal_ ? t + 1 : T;
          // datt (T) and dv
          for (int64_t t2 = 0; t2 < visible; ++t2) {
            const float* v = qp + (b * T + t2) * 3 * C + 2 * C + h * hs;
            float* dv = dq + (b * T + t2) * 3 * C + 2 * C + h * hs;
            float s = 0.0f;
            for (int64_t i = 0; i < hs; ++i) {
              s += g[i] * v[i];
              dv[i] += row[t2] * g[i];
            }
            datt[size_t(t2)] = s;
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
  qkv_saved_ = Tensor();
  att_saved_ = Tensor();
  return qkv_->backward(dqkv, ctx);
}

}  // namespace qsync
