// File: worker/layers/embedding.h
// Token and position embeddings (GPT-2 style).
//   EmbeddingLayer   ids (B, T) -> (B, T, dim): y[b, t] = weight[id[b, t]] + position[t].
//                    Ids arrive as FP32 holding integers (the engine's token convention); an id
//                    that is not an integer in [0, vocab) throws std::invalid_argument naming
//                    it. d.out is dim, d.vocab the vocabulary size (when 0, recovered from the
//                    resolved parameter_count = vocab * dim + T * dim).
//                    Parameters <name>.weight (vocab, dim) and <name>.position (T, dim), both
//                    N(0, 0.02), both decayed. Saves the ids as int32 (B * T * 4 bytes).
//                    backward accumulates both tables and returns an all-zero dx (B, T): ids have
//                    no gradient.
//   PositionalLayer  x (B, T, C) -> x + weight[t]; <name>.weight (T, C) N(0, 0.02). Saves nothing;
//                    dx is a copy of dy.
// Parameter values are zero until init_parameters.
#pragma once

#include "worker/layer.h"

namespace qsync {

class EmbeddingLayer : public Layer {
 public:
  static constexpr float INIT_STD = 0.02f;

  EmbeddingLayer(const LayerDesc& d, MemoryAccount* memory);
  Tensor forward(const Tensor& x, StepContext& ctx) override;
  Tensor backward(const Tensor& dy, StepContext& ctx) override;
  void collect_parameters(std::vector<Parameter*>& out) override;
  void init_parameters(std::mt19937_64& rng) override;
  int64_t saved_bytes() const override { return ids_.defined() ? ids_.bytes() : 0; }

 private:
  int64_t vocab_ = 0, T_ = 0, dim_ = 0;
  Parameter weight_;    // (vocab, dim)
  Parameter position_;  // (T, dim)
  Tensor ids_;          // (B, T) int32, stored as a 4-byte tensor
};

class PositionalLayer : public Layer {
 public:
  static constexpr float INIT_STD = 0.02f;

  PositionalLayer(const LayerDesc& d, MemoryAccount* memory);
  Tensor forward(const Tensor& x, StepContext& ctx) override;
  Tensor backward(const Tensor& dy, StepContext& ctx) override;
  void collect_parameters(std::vector<Parameter*>& out) override { out.push_back(&weight_); }
  void init_parameters(std::mt19937_64& rng) override;

 private:
  int64_t T_ = 0, C_ = 0;
  Parameter weight_;  // (T, C)
};

}  // namespace qsync
