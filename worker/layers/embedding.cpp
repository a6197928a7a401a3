// File: worker/layers/embedding.cpp
// Token + learned position embeddings, and the learned positional layer.
#include "worker/layers/embedding.h"

#include <cmath>
#include <stdexcept>

#include "worker/layers/parameter_init.h"
#include "worker/layers/shape_check.h"

namespace qsync {

// ---------------------------------------------------------------------------------------------
// Embedding

EmbeddingLayer::EmbeddingLayer(const LayerDesc& d, MemoryAccount* memory) : Layer(d) {
  if (d.in_shape.size() != 1 || d.in_shape[0] < 1)
    throw std::invalid_argument("layer '" + d.name + "': embedding needs a token input (T), got " +
                                tensor_shape_string(d.in_shape));
  if (d.out < 1)
    throw std::invalid_argument("layer '" + d.name + "': embedding needs dim >= 1");
  T_ = d.in_shape[0];
  dim_ = d.out;
  // The vocabulary: d.vocab, or else recovered from the resolved parameter count
  // (vocab * dim + T * dim) for descriptions that do not carry it.
  vocab_ = d.vocab;
  if (vocab_ == 0 && d.parameter_count > T_ * dim_ && (d.parameter_count - T_ * dim_) % dim_ == 0)
    vocab_ = (d.parameter_count - T_ * dim_) / dim_;
  if (vocab_ < 1)
    throw std::invalid_argument("layer '" + d.name + "': embedding needs the vocabulary size (LayerDesc::vocab, "
                                "from the model's input.vocab), got " + std::to_string(d.vocab));
  check_resolved_shape(d.out_shape, {T_, dim_}, d.name, "out_shape");
  desc_.out_shape = {T_, dim_};
  weight_ = parameter_allocate(d.name + ".weight", {vocab_, dim_}, true, memory);
  position_ = parameter_allocate(d.name + ".position", {T_, dim_}, true, memory);
}

void EmbeddingLayer::collect_parameters(std::vector<Parameter*>& out) {
  out.push_back(&weight_);
  out.push_back(&position_);
}

void EmbeddingLayer::init_parameters(std::mt19937_64& rng) {
  init_normal(weight_.value, INIT_STD, rng);
  init_normal(position_.value, INIT_STD, rng);
}

Tensor EmbeddingLayer::forward(const Tensor& x, StepContext& ctx) {
  const int64_t B = check_batched(x, desc_.in_shape, name(), "input");
  const int64_t T = T_, C = dim_;
  // Ids first, serially: the error names the first bad position.
  Tensor ids = Tensor::empty({B, T}, Precision::FP32, ctx.memory, name() + ".ids");  // (B, T) int32
  const float* xp = x.f32();
  int32_t* ip = ids.as<int32_t>();
  for (int64_t i = 0; i < B * T; ++i) {
    const float v = xp[i];
    if (!(v >= 0.0f && v < float(vocab_)) || v != std::floor(v))
      throw std::invalid_argument("layer '" + name() + "': token id " + std::to_string(v) + " at (batch " +
                                  std::to_string(i / T) + ", position " + std::to_string(i % T) +
                                  ") is not an integer in [0, " + std::to_string(vocab_) +
                                  "); check the data's vocabulary against the model's input.vocab");
    ip[i] = int32_t(v);
  }
  Tensor y = Tensor::empty({B, T, C}, Precision::FP32, ctx.memory, name() + ".out");  // (B, T, C)
  const float* wte = weight_.value.f32();
  const float* wpe = position_.value.f32();
  float* yp = y.f32();
#pragma omp parallel for if (B * T * C > (1 << 16))
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const float* e = wte + int64_t(ip[b * T + t]) * C;
      const float* p = wpe + t * C;
      float* out = yp + (b * T + t) * C;
      for (int64_t c = 0; c < C; ++c) out[c] = e[c] + p[c];
    }
  ids_ = ctx.training ? ids : Tensor();
  return y;
}

Tensor EmbeddingLayer::backward(const Tensor& dy, StepContext& ctx) {
  const int64_t B = check_batched(dy, desc_.out_shape, name(), "dy");
  if (!ids_.defined() || ids_.dim(0) != B)
    throw std::logic_error("layer '" + name() + "': backward without a matching training forward");
  const int64_t T = T_, C = dim_;
  const float* dyp = dy.f32();
  const int32_t* ip = ids_.as<int32_t>();
  // Token table: rows collide when ids repeat, so one pass in (b, t) order.
  float* dwte = weight_.grad.f32();
  for (int64_t i = 0; i < B * T; ++i) {
    float* row = dwte + int64_t(ip[i]) * C;
    const float* g = dyp + i * C;
    for (int64_t c = 0; c < C; ++c) row[c] += g[c];
  }
  // Position table: each t owned by one thread, batch summed in order.
  float* dwpe = position_.grad.f32();
#pragma omp parallel for if (B * T * C > (1 << 16))
  for (int64_t t = 0; t < T; ++t)
    for (int64_t b = 0; b < B; ++b) {
      const float* g = dyp + (b * T + t) * C;
      for (int64_t c = 0; c < C; ++c) dwpe[t * C + c] += g[c];
    }
  ids_ = Tensor();
  return Tensor::zeros({B, T}, Precision::FP32, ctx.memory, name() + ".dx");  // (B, T): no gradient
}

// ---------------------------------------------------------------------------------------------
// Positional

PositionalLayer::PositionalLayer(const LayerDesc& d, MemoryAccount* memory) : Layer(d) {
  if (d.in_shape.size() != 2)
    throw std::invalid_argument("layer '" + d.name + "': positional needs tokens (T, C), got " +
                                tensor_shape_string(d.in_shape));
  T_ = d.in_shape[0];
  C_ = d.in_shape[1];
  check_resolved_shape(d.out_shape, d.in_shape, d.name, "out_shape");
  desc_.out_shape = d.in_shape;
  weight_ = parameter_allocate(d.name + ".weight", {T_, C_}, true, memory);
}

void PositionalLayer::init_parameters(std::mt19937_64& rng) { init_normal(weight_.value, INIT_STD, rng); }

Tensor PositionalLayer::forward(const Tensor& x, StepContext& ctx) {
  const int64_t B = check_batched(x, desc_.in_shape, name(), "input");
  const int64_t TC = T_ * C_;
  Tensor y = Tensor::empty(x.shape(), Precision::FP32, ctx.memory, name() + ".out");  // (B, T, C)
  const float* xp = x.f32();
  const float* wp = weight_.value.f32();
  float* yp = y.f32();
#pragma omp parallel for if (B * TC > (1 << 16))
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < TC; ++i) yp[b * TC + i] = xp[b * TC + i] + wp[i];
  return y;
}

Tensor PositionalLayer::backward(const Tensor& dy, StepContext& ctx) {
  const int64_t B = check_batched(dy, desc_.out_shape, name(), "dy");
  const int64_t TC = T_ * C_;
  const float* dyp = dy.f32();
  float* dw = weight_.grad.f32();
  // Each element of the table sums the batch in order (the outer loop stays serial).
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < TC; ++i) dw[i] += dyp[b * TC + i];
  return dy.clone(ctx.memory, name() + ".dx");  // (B, T, C)
}

}  // namespace qsync
