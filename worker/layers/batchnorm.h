// File: worker/layers/batchnorm.h
// Batch normalization (ONNX BatchNormalization, PyTorch's BatchNorm1d/2d) over channel dim 1.
//   x (B, C, S...) -> y same shape; weight, bias (C) trained (no weight decay).
//   Training: batch statistics (biased variance) normalize; running mean / variance are kept as
//   running = running * momentum + batch * (1 - momentum) (ONNX's momentum; PyTorch's 0.1 is
//   ONNX's 0.9) with the unbiased batch variance, as PyTorch does. Eval: running statistics.
//   The running statistics are the rank's own (not parameters: they are neither synchronized
//   nor checkpointed). Saves x-hat (B, C, S) and 1/std (C) FP32.
#pragma once

#include "worker/layer.h"

namespace qsync {

class BatchNormLayer : public Layer {
 public:
  BatchNormLayer(const LayerDesc& d, MemoryAccount* memory);
  Tensor forward(const Tensor& x, StepContext& ctx) override;
  Tensor backward(const Tensor& dy, StepContext& ctx) override;
  void collect_parameters(std::vector<Parameter*>& out) override;
  int64_t saved_bytes() const override { return xhat_.defined() ? xhat_.bytes() + rstd_.bytes() : 0; }
  const std::vector<float>& running_mean() const { return running_mean_; }
  const std::vector<float>& running_var() const { return running_var_; }

 private:
  int64_t C_ = 0, S_ = 1;
  Parameter weight_, bias_;  // (C), (C)
  std::vector<float> running_mean_, running_var_;  // (C) each
  Tensor xhat_, rstd_;  // (B, C, S), (C) FP32 host
};

}  // namespace qsync
