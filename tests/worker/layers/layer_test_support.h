// File: tests/worker/layers/layer_test_support.h
// Helpers for the layer tests: descriptions, random tensors, a test-only layer factory (the
// registry is not linked here), and the memory check every layer's test runs.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "worker/layer.h"
#include "worker/layers/activation.h"
#include "worker/layers/container.h"
#include "worker/layers/dropout.h"
#include "worker/layers/embedding.h"
#include "worker/layers/layernorm.h"
#include "worker/layers/pool.h"
#include "worker/layers/reshape.h"

namespace qsync::testing {

inline LayerDesc make_desc(const std::string& name, LayerKind kind, const Shape& in_shape) {
  LayerDesc d;
  d.name = name;
  d.kind = kind;
  d.in_shape = in_shape;
  return d;
}

// Unaccounted FP32 tensor with U(lo, hi) entries.
inline Tensor random_tensor(const Shape& shape, std::mt19937_64& rng, float lo = -1.0f, float hi = 1.0f) {
  Tensor t = Tensor::empty(shape, Precision::FP32, nullptr);
  std::uniform_real_distribution<float> u(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = u(rng);
  return t;
}

inline Tensor tensor_from(const Shape& shape, const std::vector<float>& values) {
  Tensor t = Tensor::empty(shape, Precision::FP32, nullptr);
  if (int64_t(values.size()) != t.numel()) throw std::invalid_argument("tensor_from: wrong value count");
  std::memcpy(t.f32(), values.data(), values.size() * sizeof(float));
  return t;
}

inline std::vector<float> values_of(const Tensor& t) { return std::vector<float>(t.f32(), t.f32() + t.numel()); }

// The layers of this library by kind; GEMM kinds are not linked into these tests.
inline std::unique_ptr<Layer> test_layer_create(const LayerDesc& d, MemoryAccount* memory) {
  switch (d.kind) {
    case LayerKind::SEQUENTIAL: return std::make_unique<SequentialLayer>(d, memory, test_layer_create);
    case LayerKind::RESIDUAL: return std::make_unique<ResidualLayer>(d, memory, test_layer_create);
    case LayerKind::RELU: return std::make_unique<ReluLayer>(d, memory);
    case LayerKind::GELU: return std::make_unique<GeluLayer>(d, memory);
    case LayerKind::MAXPOOL2D: return std::make_unique<MaxPool2dLayer>(d, memory);
    case LayerKind::GLOBAL_AVG_POOL: return std::make_unique<GlobalAvgPoolLayer>(d, memory);
    case LayerKind::FLATTEN: return std::make_unique<FlattenLayer>(d, memory);
    case LayerKind::TO_TOKENS: return std::make_unique<ToTokensLayer>(d, memory);
    case LayerKind::POSITIONAL: return std::make_unique<PositionalLayer>(d, memory);
    case LayerKind::LAYERNORM: return std::make_unique<LayerNormLayer>(d, memory);
    case LayerKind::EMBEDDING: return std::make_unique<EmbeddingLayer>(d, memory);
    case LayerKind::DROPOUT: return std::make_unique<DropoutLayer>(d, memory);
    default: throw std::invalid_argument("test_layer_create: kind not in this library");
  }
}

// One training step's memory: the output (unless it is a view of x) and the saved state are
// charged to ctx.memory by forward; backward releases the saved state. With every tensor
// dropped, the account returns to its baseline. Returns the saved bytes after forward.
inline int64_t check_step_memory(Layer& layer, const Tensor& x, uint64_t seed = 1) {
  MemoryAccount account;
  StepContext ctx;
  ctx.memory = &account;
  ctx.seed = seed;
  ctx.training = true;
  int64_t saved = 0;
  {
    Tensor y = layer.forward(x, ctx);
    saved = layer.saved_bytes();
    const int64_t out_bytes = y.data() == x.data() ? 0 : y.bytes();
    EXPECT_EQ(account.current_bytes(), out_bytes + saved) << layer.name();
    Tensor dy = Tensor::zeros(y.shape(), Precision::FP32, nullptr);
    Tensor dx = layer.backward(dy, ctx);
    EXPECT_EQ(layer.saved_bytes(), 0) << layer.name();
    EXPECT_EQ(dx.shape(), x.shape()) << layer.name();
  }
  EXPECT_EQ(account.current_bytes(), 0) << layer.name() << ": memory not returned after backward";
  // Eval saves nothing.
  {
    ctx.training = false;
    Tensor y = layer.forward(x, ctx);
    EXPECT_EQ(layer.saved_bytes(), 0) << layer.name() << ": eval forward saved state";
  }
  EXPECT_EQ(account.current_bytes(), 0) << layer.name();
  return saved;
}

// Bytes of every parameter's value and grad.
inline int64_t parameter_bytes(Layer& layer) {
  std::vector<Parameter*> params;
  layer.collect_parameters(params);
  int64_t total = 0;
  for (Parameter* p : params) total += p->value.bytes() + p->grad.bytes();
  return total;
}

}  // namespace qsync::testing
