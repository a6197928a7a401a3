// File: worker/layers/batchnorm.h
// Batch normalization (ONNX BatchNormalization, PyTorch's BatchNorm1d/2d) over channel dim 1.
//   x (B, C, S...) -> y same shape; weight, bias (C) trained (no weight decay).
//   Training: batch statistics (biased variance) normalize; running mean / variance are kept as
//   running = running * momentum + batch * (1 - momentum) (ONNX's momentum; PyTorch's 0.1 is
//   ONNX's 0.9) with the unbiased batch variance, as PyTorch does. Eval: running statistics.
//   The running statistics are model state, not parameters (RunningStatistics): checkpointed, and
//   under data parallelism each step's update is redone from the global batch's mean and unbiased
//   variance (batch_sums: n, per channel the sum, the squared deviations from the local mean and
//   n * mean^2). The normalization itself uses the rank's local batch (as DDP, not SyncBN).
//   Saves x-hat (B, C, S) and 1/std (C) FP32.
#pragma once

#include "worker/layer.h"

namespace qsync {

class BatchNormLayer : public Layer, public RunningStatistics {
 public:
  BatchNormLayer(const LayerDesc& d, MemoryAccount* memory);
  Tensor forward(const Tensor& x, StepContext& ctx) override;
  Tensor backward(const Tensor& dy, StepContext& ctx) override;
  void collect_parameters(std::vector<Parameter*>& out) override;
  int64_t saved_bytes() const override { return xhat_.defined() ? xhat_.bytes() + rstd_.bytes() : 0; }
  const std::vector<float>& running_mean() const { return running_mean_; }
  const std::vector<float>& running_var() const { return running_var_; }

  RunningStatistics* running_statistics() override { return this; }
  std::vector<Buffer> buffers() override;
  int64_t batch_sums_size() const override { return 1 + 3 * C_; }
  void batch_sums(double* out) const override;
  void update_from_sums(const double* sums) override;

 private:
  int64_t C_ = 0, S_ = 1;
  Parameter weight_, bias_;  // (C), (C)
  std::vector<float> running_mean_, running_var_;  // (C) each
  // The last training forward not yet redone from global sums: the statistics before it, its
  // element count per channel and per channel sum and squared deviations from its mean.
  bool pending_ = false;
  std::vector<float> mean_before_, var_before_;
  int64_t pending_n_ = 0;
  std::vector<double> pending_sum_, pending_m2_;
  Tensor xhat_, rstd_;  // (B, C, S), (C) FP32 host
};

}  // namespace qsync
