// File: worker/layers/embedding.cpp
// Token + learned position embeddings, and the learned positional layer.
#include "worker/layers/embedding.h"

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
  DeviceOps& ops = ops_of(ctx);
  Tensor ids = ops.empty({B, T_}, Precision::FP32, ctx.memory, name() + ".ids");  // (B, T) int32
  ops.embedding_ids(x, vocab_, ids, name());
  Tensor y = ops.empty({B, T_, dim_}, Precision::FP32, ctx.memory, name() + ".out");  // (B, T, C)
  ops.embedding_forward(ids, weight_.value, position_.value, y);
  ids_ = ctx.training ? ids : Tensor();
  return y;
}

// dwte[ids[b, t]] += dy[b, t] in (b, t) order (rows collide when ids repeat); dwpe[t] += sum_b dy
Tensor EmbeddingLayer::backward(const Tensor& dy, StepContext& ctx) {
  const int64_t B = check_batched(dy, desc_.out_shape, name(), "dy");
  if (!ids_.defined() || ids_.dim(0) != B)
    throw std::logic_error("layer '" + name() + "': backward without a matching training forward");
  DeviceOps& ops = ops_of(ctx);
  ops.embedding_backward(dy, ids_, weight_.grad, position_.grad);
  ids_ = Tensor();
  return ops.zeros({B, T_}, Precision::FP32, ctx.memory, name() + ".dx");  // (B, T): no gradient
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
  check_batched(x, desc_.in_shape, name(), "input");
  DeviceOps& ops = ops_of(ctx);
  Tensor y = ops.empty(x.shape(), Precision::FP32, ctx.memory, name() + ".out");  // (B, T, C)
  ops.add_broadcast(x, weight_.value, y);
  return y;
}

Tensor PositionalLayer::backward(const Tensor& dy, StepContext& ctx) {
  check_batched(dy, desc_.out_shape, name(), "dy");
  DeviceOps& ops = ops_of(ctx);
  ops.sum_batch_into(dy, weight_.grad);  // each element of the table sums the batch in order
  Tensor dx = ops.empty(dy.shape(), Precision::FP32, ctx.memory, name() + ".dx");  // (B, T, C)
  ops.copy(dy, dx);
  return dx;
}

}  // namespace qsync
