// File: worker/tp/spd_block_shards.cpp
// Builds a rank's LN, attention and MLP shards of a block as engine layers, copying the rows and
// columns the Megatron layout gives the rank, and writes trained shards back into the block.
#include "worker/tp/spd_block_shards.h"

#include <cstring>
#include <stdexcept>

namespace qsync {

namespace {

void check_size(const std::vector<float>& v, int64_t expected, const char* what, int64_t block) {
  if (int64_t(v.size()) != expected)
    throw std::invalid_argument("block " + std::to_string(block) + ": " + what + " has " + std::to_string(v.size()) +
                                " values, expected " + std::to_string(expected) +
                                " (the weights do not match the model's width / MLP width)");
}

std::vector<Parameter*> parameters_of(Layer& layer) {
  std::vector<Parameter*> p;
  layer.collect_parameters(p);
  return p;
}

LayerDesc linear_desc(const std::string& name, int64_t in, int64_t out, bool bias) {
  LayerDesc d;
  d.name = name;
  d.kind = LayerKind::LINEAR;
  d.in_shape = {in};
  d.out_shape = {out};
  d.out = out;
  d.bias = bias;
  return d;
}

void copy_into(Tensor& t, const float* src) { std::memcpy(t.f32(), src, size_t(t.numel()) * sizeof(float)); }

}  // namespace

BlockShape block_shape_check(const BlockWeights& b, int64_t width, int64_t mlp_width, bool causal, int64_t block) {
  BlockShape s{width, b.heads, mlp_width, causal};
  if (width < 1 || b.heads < 1 || width % b.heads != 0)
    throw std::invalid_argument("block " + std::to_string(block) + ": width " + std::to_string(width) +
                                " is not a multiple of its " + std::to_string(b.heads) + " heads");
  const int64_t C = width, F = mlp_width;
  check_size(b.ln1_gain, C, "ln1 gain", block);
  check_size(b.ln1_bias, C, "ln1 bias", block);
  check_size(b.qkv_weight, 3 * C * C, "qkv weight", block);
  check_size(b.qkv_bias, 3 * C, "qkv bias", block);
  check_size(b.proj_weight, C * C, "proj weight", block);
  check_size(b.proj_bias, C, "proj bias", block);
  check_size(b.ln2_gain, C, "ln2 gain", block);
  check_size(b.ln2_bias, C, "ln2 bias", block);
  check_size(b.fc1_weight, F * C, "fc1 weight", block);
  check_size(b.fc1_bias, F, "fc1 bias", block);
  check_size(b.fc2_weight, C * F, "fc2 weight", block);
  check_size(b.fc2_bias, C, "fc2 bias", block);
  return s;
}

// ---------------------------------------------------------------------------------------------
// layernorm

std::unique_ptr<LayerNormLayer> layernorm_from(const std::string& name, const std::vector<float>& gain,
                                               const std::vector<float>& bias, MemoryAccount* memory) {
  LayerDesc d;
  d.name = name;
  d.kind = LayerKind::LAYERNORM;
  d.in_shape = {int64_t(gain.size())};
  auto ln = std::make_unique<LayerNormLayer>(d, memory);
  const std::vector<Parameter*> p = parameters_of(*ln);  // weight, bias
  copy_into(p[0]->value, gain.data());
  copy_into(p[1]->value, bias.data());
  return ln;
}

void layernorm_store(LayerNormLayer& ln, std::vector<float>& gain, std::vector<float>& bias) {
  const std::vector<Parameter*> p = parameters_of(ln);
  gain.assign(p[0]->value.f32(), p[0]->value.f32() + p[0]->value.numel());
  bias.assign(p[1]->value.f32(), p[1]->value.f32() + p[1]->value.numel());
}

// ---------------------------------------------------------------------------------------------
// attention: local QKV row j*hs+i of section s (Q, K, V) is global row s*C + h*hs + i, h = heads[j];
// local W_O column j*hs+i is global column h*hs+i.

std::unique_ptr<AttentionLayer> attention_shard(const BlockWeights& b, const BlockShape& shape,
                                                const std::vector<int>& heads, const std::string& name,
                                                MemoryAccount* memory) {
  const int64_t C = shape.width, hs = shape.head_size(), n = int64_t(heads.size()), A = n * hs;
  for (int h : heads)
    if (h < 0 || h >= shape.heads)
      throw std::invalid_argument("attention shard '" + name + "': head " + std::to_string(h) + " is not in 0.." +
                                  std::to_string(shape.heads - 1));
  LayerDesc d;
  d.name = name;
  d.kind = LayerKind::ATTENTION;
  d.heads = n;
  d.causal = shape.causal;
  d.in_shape = {C};
  d.out_shape = {C};
  d.children = {linear_desc(name + ".qkv", C, 3 * A, true), linear_desc(name + ".proj", A, C, false)};
  auto attn = std::make_unique<AttentionLayer>(d, memory);
  const std::vector<Parameter*> qkv = parameters_of(attn->qkv());  // (3A, C), (3A)
  const std::vector<Parameter*> proj = parameters_of(attn->proj());  // (C, A)
  float* qw = qkv[0]->value.f32();
  float* qb = qkv[1]->value.f32();
  float* pw = proj[0]->value.f32();
  for (int64_t s = 0; s < 3; ++s)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < hs; ++i) {
        const int64_t local = s * A + j * hs + i, global = s * C + heads[size_t(j)] * hs + i;
        std::memcpy(qw + local * C, b.qkv_weight.data() + global * C, size_t(C) * sizeof(float));
        qb[local] = b.qkv_bias[size_t(global)];
      }
  for (int64_t r = 0; r < C; ++r)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < hs; ++i) pw[r * A + j * hs + i] = b.proj_weight[size_t(r * C + heads[size_t(j)] * hs + i)];
  return attn;
}

void attention_shard_store(AttentionLayer& attn, const BlockShape& shape, const std::vector<int>& heads,
                           BlockWeights& b) {
  const int64_t C = shape.width, hs = shape.head_size(), n = int64_t(heads.size()), A = n * hs;
  const std::vector<Parameter*> qkv = parameters_of(attn.qkv());
  const std::vector<Parameter*> proj = parameters_of(attn.proj());
  const float* qw = qkv[0]->value.f32();
  const float* qb = qkv[1]->value.f32();
  const float* pw = proj[0]->value.f32();
  for (int64_t s = 0; s < 3; ++s)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < hs; ++i) {
        const int64_t local = s * A + j * hs + i, global = s * C + heads[size_t(j)] * hs + i;
        std::memcpy(b.qkv_weight.data() + global * C, qw + local * C, size_t(C) * sizeof(float));
        b.qkv_bias[size_t(global)] = qb[local];
      }
  for (int64_t r = 0; r < C; ++r)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < hs; ++i) b.proj_weight[size_t(r * C + heads[size_t(j)] * hs + i)] = pw[r * A + j * hs + i];
}

// ---------------------------------------------------------------------------------------------
// MLP slice s of N: fc1 rows s*F/N.. (and their bias), fc2 columns s*F/N..

MlpShard::MlpShard(const BlockWeights& b, const BlockShape& shape, int slice, int slices, const std::string& name,
                   MemoryAccount* memory)
    : shape_(shape), slice_(slice), slices_(slices) {
  const int64_t C = shape.width, F = shape.mlp_width;
  if (slices < 1 || F % slices != 0 || slice < 0 || slice >= slices)
    throw std::invalid_argument("MLP shard '" + name + "': slice " + std::to_string(slice) + " of " +
                                std::to_string(slices) + " does not split the MLP width " + std::to_string(F));
  const int64_t Fs = F / slices, first = slice * Fs;
  fc1_ = std::make_unique<LinearLayer>(linear_desc(name + ".fc1", C, Fs, true), memory);
  LayerDesc g;
  g.name = name + ".gelu";
  g.kind = LayerKind::GELU;
  g.in_shape = {Fs};
  gelu_ = std::make_unique<GeluLayer>(g, memory);
  fc2_ = std::make_unique<LinearLayer>(linear_desc(name + ".fc2", Fs, C, false), memory);
  const std::vector<Parameter*> p1 = parameters_of(*fc1_);  // (Fs, C), (Fs)
  const std::vector<Parameter*> p2 = parameters_of(*fc2_);  // (C, Fs)
  copy_into(p1[0]->value, b.fc1_weight.data() + first * C);
  copy_into(p1[1]->value, b.fc1_bias.data() + first);
  float* w2 = p2[0]->value.f32();
  for (int64_t r = 0; r < C; ++r)
    std::memcpy(w2 + r * Fs, b.fc2_weight.data() + r * F + first, size_t(Fs) * sizeof(float));
}

Tensor MlpShard::forward(const Tensor& x, StepContext& ctx) {
  const Tensor u = fc1_->forward(x, ctx);  // (M, F/N)
  const Tensor g = gelu_->forward(u, ctx);
  return fc2_->forward(g, ctx);  // (M, C)
}

Tensor MlpShard::backward(const Tensor& dz, StepContext& ctx) {
  const Tensor dg = fc2_->backward(dz, ctx);
  const Tensor du = gelu_->backward(dg, ctx);
  return fc1_->backward(du, ctx);
}

void MlpShard::collect_parameters(std::vector<Parameter*>& out) {
  fc1_->collect_parameters(out);
  fc2_->collect_parameters(out);
}

void MlpShard::store(BlockWeights& b) const {
  const int64_t C = shape_.width, F = shape_.mlp_width, Fs = F / slices_, first = slice_ * Fs;
  const std::vector<Parameter*> p1 = parameters_of(*fc1_);
  const std::vector<Parameter*> p2 = parameters_of(*fc2_);
  std::memcpy(b.fc1_weight.data() + first * C, p1[0]->value.f32(), size_t(Fs * C) * sizeof(float));
  std::memcpy(b.fc1_bias.data() + first, p1[1]->value.f32(), size_t(Fs) * sizeof(float));
  const float* w2 = p2[0]->value.f32();
  for (int64_t r = 0; r < C; ++r)
    std::memcpy(b.fc2_weight.data() + r * F + first, w2 + r * Fs, size_t(Fs) * sizeof(float));
}

Parameter bias_parameter(const std::string& name, const std::vector<float>& value, MemoryAccount* memory) {
  Parameter p;
  p.name = name;
  p.value = Tensor::empty({int64_t(value.size())}, Precision::FP32, memory, name);
  copy_into(p.value, value.data());
  p.grad = Tensor::zeros({int64_t(value.size())}, Precision::FP32, memory, name + ".grad");
  p.decay = false;
  return p;
}

}  // namespace qsync
