// File: worker/layers/attention.h
// Multi-head self-attention: QKV projection, scaled dot-product with optional causal mask,
// softmax, output projection. The two projections are LinearLayer children named
// "<name>.qkv" and "<name>.proj" (planned like any GEMM layer); the score and value matmuls run
// in FP32 (at least 16 bit, as the plan rules require).
//   x (B, T, C) -> qkv (B, T, 3A) -> att (B, H, T, T) -> out (B, T, A) -> y (B, T, C)
// A = qkv.out / 3 is the heads' width, head size A / H. A model's attention has A = C; a
// tensor-parallel rank's shard of it (worker/tp/spd_block_shards.h) holds a subset of the heads,
// so A = C * H_local / H_model while its proj still maps A back to C.
#pragma once

#include <memory>

#include "worker/layer.h"
#include "worker/layers/linear.h"

namespace qsync {

class AttentionLayer : public Layer {
 public:
  AttentionLayer(const LayerDesc& d, MemoryAccount* memory);
  Tensor forward(const Tensor& x, StepContext& ctx) override;
  Tensor backward(const Tensor& dy, StepContext& ctx) override;
  void collect_parameters(std::vector<Parameter*>& out) override;
  void init_parameters(std::mt19937_64& rng) override;
  void apply_plan(const RankPlan& plan) override;
  int64_t saved_bytes() const override;
  LinearLayer& qkv() { return *qkv_; }
  LinearLayer& proj() { return *proj_; }

 private:
  int64_t heads_;
  bool causal_;
  std::unique_ptr<LinearLayer> qkv_, proj_;
  Tensor qkv_saved_;  // (B, T, 3A)
  Tensor att_saved_;  // (B, H, T, T) softmax probabilities
};

}  // namespace qsync
