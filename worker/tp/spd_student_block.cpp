// File: worker/tp/spd_student_block.cpp
// Forward and backward of the SPD block over its N rank shards (see the header for the formula).
#include "worker/tp/spd_student_block.h"

#include <cstring>
#include <stdexcept>
#include <string>

namespace qsync {

namespace {

// out[c] += sum over rows of g[r, c]; g (M, C).
void add_column_sums(const Tensor& g, Tensor& out) {
  const int64_t C = out.numel(), M = g.numel() / C;
  const float* gp = g.f32();
  float* o = out.f32();
  for (int64_t r = 0; r < M; ++r)
    for (int64_t c = 0; c < C; ++c) o[c] += gp[r * C + c];
}

}  // namespace

SpdStudentBlock::SpdStudentBlock(const BlockWeights& block, const BlockShape& shape,
                                 const std::vector<std::vector<int>>& heads_of_rank,
                                 const std::vector<int>& mlp_slice_of_rank, MemoryAccount* memory)
    : shape_(shape), heads_of_rank_(heads_of_rank), mlp_slice_of_rank_(mlp_slice_of_rank) {
  const int n = int(heads_of_rank.size());
  if (n < 1 || int(mlp_slice_of_rank.size()) != n)
    throw std::invalid_argument("SPD block: " + std::to_string(heads_of_rank.size()) + " head groups and " +
                                std::to_string(mlp_slice_of_rank.size()) +
                                " MLP slices; give one of each per rank (at least one rank)");
  ln1_ = layernorm_from("ln1", block.ln1_gain, block.ln1_bias, memory);
  ln2_ = layernorm_from("ln2", block.ln2_gain, block.ln2_bias, memory);
  for (int r = 0; r < n; ++r) {
    const std::string rank = "rank" + std::to_string(r);
    attn_.push_back(attention_shard(block, shape, heads_of_rank[size_t(r)], rank + ".attn", memory));
    mlp_.push_back(std::make_unique<MlpShard>(block, shape, mlp_slice_of_rank[size_t(r)], n, rank + ".mlp", memory));
  }
  proj_bias_ = bias_parameter("proj.bias", block.proj_bias, memory);
  fc2_bias_ = bias_parameter("fc2.bias", block.fc2_bias, memory);
}

// ---------------------------------------------------------------------------------------------
// forward

Tensor SpdStudentBlock::forward(const Tensor& x, StepContext& ctx) {
  const int64_t C = shape_.width, n = ranks();
  if (x.rank() != 3 || x.dim(2) != C)
    throw std::invalid_argument("SPD block: input has " + std::to_string(x.rank()) + " dimensions / width " +
                                std::to_string(x.rank() ? x.dim(x.rank() - 1) : 0) + ", expected (S, T, " +
                                std::to_string(C) + ")");
  const int64_t S = x.dim(0), T = x.dim(1), M = S * T;
  x_shape_ = x.shape();
  const Tensor a = ln1_->forward(x.reshape({M, C}), ctx);  // (M, C)
  const float* xp = x.f32();
  const float* bo = proj_bias_.value.f32();
  const float* bf = fc2_bias_.value.f32();
  Tensor h = Tensor::empty({n * M, C}, Precision::FP32, ctx.memory, "SPD H_i");  // (N*M, C)
  Tensor sum = Tensor::zeros({M, C}, Precision::FP32, ctx.memory, "SPD sum");    // (M, C): sum_i Y_i + Z_i
  std::vector<Tensor> y(static_cast<size_t>(n));                                            // [rank] (S, T, C)
  for (int64_t r = 0; r < n; ++r) {
    y[size_t(r)] = attn_[size_t(r)]->forward(a.reshape({S, T, C}), ctx);
    const float* yp = y[size_t(r)].f32();
    float* hp = h.f32() + r * M * C;
    for (int64_t i = 0; i < M; ++i)
      for (int64_t c = 0; c < C; ++c) hp[i * C + c] = xp[i * C + c] + yp[i * C + c] + bo[c];
  }
  const Tensor g = ln2_->forward(h, ctx);  // (N*M, C)
  float* sp = sum.f32();
  for (int64_t r = 0; r < n; ++r) {
    Tensor g_r = Tensor::empty({M, C}, Precision::FP32, ctx.memory, "SPD LN2(H_i)");
    std::memcpy(g_r.f32(), g.f32() + r * M * C, size_t(M * C) * sizeof(float));
    const Tensor z = mlp_[size_t(r)]->forward(g_r, ctx);  // (M, C)
    const float* yp = y[size_t(r)].f32();
    const float* zp = z.f32();
    for (int64_t i = 0; i < M * C; ++i) sp[i] += yp[i] + zp[i];  // the rank's Y_i + Z_i, summed in rank order
  }
  Tensor out = Tensor::empty({S, T, C}, Precision::FP32, ctx.memory, "SPD block output");
  float* op = out.f32();
  for (int64_t i = 0; i < M; ++i)
    for (int64_t c = 0; c < C; ++c) op[i * C + c] = xp[i * C + c] + sp[i * C + c] + bo[c] + bf[c];
  return out;
}

// ---------------------------------------------------------------------------------------------
// backward: d out flows to b_fc2, b_O, every Z_i and every Y_i; dZ_i -> MLP_i -> LN2 -> dH_i,
// which flows to b_O and Y_i again; dY_i -> Attn_i -> summed into dA -> LN1.

void SpdStudentBlock::backward(const Tensor& dout, StepContext& ctx) {
  if (dout.shape() != x_shape_) throw std::logic_error("SPD block: backward without a matching training forward");
  const int64_t C = shape_.width, n = ranks(), S = x_shape_[0], T = x_shape_[1], M = S * T;
  const Tensor d = dout.reshape({M, C});
  add_column_sums(d, fc2_bias_.grad);
  add_column_sums(d, proj_bias_.grad);
  Tensor dg = Tensor::empty({n * M, C}, Precision::FP32, ctx.memory, "SPD dLN2");  // (N*M, C)
  for (int64_t r = n - 1; r >= 0; --r) {
    const Tensor dg_r = mlp_[size_t(r)]->backward(d, ctx);  // (M, C)
    std::memcpy(dg.f32() + r * M * C, dg_r.f32(), size_t(M * C) * sizeof(float));
  }
  const Tensor dh = ln2_->backward(dg, ctx);  // (N*M, C)
  add_column_sums(dh, proj_bias_.grad);
  Tensor da = Tensor::zeros({M, C}, Precision::FP32, ctx.memory, "SPD dLN1");  // (M, C)
  for (int64_t r = n - 1; r >= 0; --r) {
    Tensor dy = Tensor::empty({S, T, C}, Precision::FP32, ctx.memory, "SPD dY_i");
    const float* dp = d.f32();
    const float* hp = dh.f32() + r * M * C;
    float* yp = dy.f32();
    for (int64_t i = 0; i < M * C; ++i) yp[i] = dp[i] + hp[i];
    const Tensor da_r = attn_[size_t(r)]->backward(dy, ctx);  // (S, T, C)
    const float* ap = da_r.f32();
    float* acc = da.f32();
    for (int64_t i = 0; i < M * C; ++i) acc[i] += ap[i];
  }
  ln1_->backward(da, ctx);
}

// ---------------------------------------------------------------------------------------------
// parameters

std::vector<Parameter*> SpdStudentBlock::parameters() {
  std::vector<Parameter*> p;
  ln1_->collect_parameters(p);
  for (auto& a : attn_) a->collect_parameters(p);
  p.push_back(&proj_bias_);
  ln2_->collect_parameters(p);
  for (auto& m : mlp_) m->collect_parameters(p);
  p.push_back(&fc2_bias_);
  return p;
}

void SpdStudentBlock::zero_grad() {
  for (Parameter* p : parameters()) std::memset(p->grad.f32(), 0, size_t(p->grad.numel()) * sizeof(float));
}

BlockWeights SpdStudentBlock::weights() const {
  const int64_t C = shape_.width, F = shape_.mlp_width;
  BlockWeights b;
  b.heads = shape_.heads;
  b.qkv_weight.assign(size_t(3 * C * C), 0.0f);
  b.qkv_bias.assign(size_t(3 * C), 0.0f);
  b.proj_weight.assign(size_t(C * C), 0.0f);
  b.fc1_weight.assign(size_t(F * C), 0.0f);
  b.fc1_bias.assign(size_t(F), 0.0f);
  b.fc2_weight.assign(size_t(C * F), 0.0f);
  layernorm_store(*ln1_, b.ln1_gain, b.ln1_bias);
  layernorm_store(*ln2_, b.ln2_gain, b.ln2_bias);
  for (int r = 0; r < ranks(); ++r) {
    attention_shard_store(*attn_[size_t(r)], shape_, heads_of_rank_[size_t(r)], b);
    mlp_[size_t(r)]->store(b);
  }
  b.proj_bias.assign(proj_bias_.value.f32(), proj_bias_.value.f32() + C);
  b.fc2_bias.assign(fc2_bias_.value.f32(), fc2_bias_.value.f32() + C);
  return b;
}

}  // namespace qsync
