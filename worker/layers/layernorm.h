// File: worker/layers/layernorm.h
// Layer normalization over the last dimension C, eps 1e-5 (PyTorch's default):
//   y = (x - mean) * rstd * weight + bias,  rstd = 1 / sqrt(var + eps),  var biased (divide by C)
// Shapes: x (B, ..., C) -> y (B, ..., C); a row is one C-vector.
// Parameters: <name>.weight (C) init 1, <name>.bias (C) init 0; neither decays.
// Saves the normalized input xhat (B, ..., C) and rstd (one per row), FP32.
#pragma once

#include "worker/layer.h"
#include "worker/ops/cpu/cpu_kernels.h"  // layernorm_rows: the host arithmetic tp/ shares

namespace qsync {

class LayerNormLayer : public Layer {
 public:
  static constexpr float EPS = LAYERNORM_EPS;

  LayerNormLayer(const LayerDesc& d, MemoryAccount* memory);
  Tensor forward(const Tensor& x, StepContext& ctx) override;
  Tensor backward(const Tensor& dy, StepContext& ctx) override;
  void collect_parameters(std::vector<Parameter*>& out) override;
  void init_parameters(std::mt19937_64& rng) override;
  int64_t saved_bytes() const override;

 private:
  int64_t C_ = 0;
  Parameter weight_, bias_;  // (C), (C)
  Tensor xhat_;              // (B, ..., C) FP32
  Tensor rstd_;              // (B * rows) FP32
};

}  // namespace qsync
