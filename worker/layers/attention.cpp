// File: worker/layers/attention.cpp
// Attention forward and backward: the qkv and proj GEMM layers around the score op of the
// rank's device (DeviceOps::attention_forward / attention_backward).
#include "worker/layers/attention.h"

#include <stdexcept>
#include <string>

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
// forward: qkv = x Wqkv^T; att = softmax(q k^T / sqrt(hs)) (causal: masked); out = att v; y = proj(out)

namespace {
// The score products may run on TF32 tensor cores when the projections themselves run below fp32.
bool scores_allow_tf32(const LinearLayer& qkv) { return qkv.precision() != LayerPrecision::FP32; }
}  // namespace

Tensor AttentionLayer::forward(const Tensor& x, StepContext& ctx) {
  DeviceOps& ops = ops_of(ctx);
  const int64_t B = x.dim(0), T = x.dim(1);
  const Tensor qkv = qkv_->forward(x, ctx);  // (B, T, 3C): C here is the heads' width A
  const int64_t C = qkv.dim(2) / 3, H = heads_;
  Tensor att = ops.empty({B, H, T, T}, Precision::FP32, ctx.memory, name() + " attention");
  Tensor out = ops.empty({B, T, C}, Precision::FP32, ctx.memory, name() + " heads output");
  {
    OpClock clock(ctx, name() + ".scores_forward");
    ops.attention_forward(qkv, {B, T, C, H, causal_}, scores_allow_tf32(*qkv_), att, out, ctx, name());
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
  DeviceOps& ops = ops_of(ctx);
  const Tensor dout = proj_->backward(dy, ctx);  // (B, T, C)
  const int64_t B = dout.dim(0), T = dout.dim(1), C = dout.dim(2), H = heads_;
  Tensor dqkv = ops.empty({B, T, 3 * C}, Precision::FP32, ctx.memory, name() + " qkv gradient");
  {
    OpClock clock(ctx, name() + ".scores_backward");
    ops.attention_backward(qkv_saved_, att_saved_, dout, {B, T, C, H, causal_}, scores_allow_tf32(*qkv_), dqkv, ctx,
                           name());
  }
  qkv_saved_ = Tensor();
  att_saved_ = Tensor();
  return qkv_->backward(dqkv, ctx);
}

}  // namespace qsync
