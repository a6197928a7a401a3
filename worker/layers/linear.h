// File: worker/layers/linear.h
// Linear: y = x W^T + b on the last dimension, computed in the layer's planned precision.
//   x (B, ..., K) -> y (B, ..., N); W (N, K), b (N) FP32 masters.
#pragma once

#include "planner/layer_precision.h"
#include "worker/layer.h"

namespace qsync {

class LinearLayer : public Layer {
 public:
  LinearLayer(const LayerDesc& d, MemoryAccount* memory);
  Tensor forward(const Tensor& x, StepContext& ctx) override;
  Tensor backward(const Tensor& dy, StepContext& ctx) override;
  void collect_parameters(std::vector<Parameter*>& out) override;
  void init_parameters(std::mt19937_64& rng) override;
  void apply_plan(const RankPlan& plan) override { precision_ = plan.precision_of(name()); }
  int64_t saved_bytes() const override;
  LayerPrecision precision() const { return precision_; }
  void set_precision(LayerPrecision p) { precision_ = p; }

 private:
  int64_t in_, out_;
  Parameter weight_, bias_;  // (N, K), (N)
  LayerPrecision precision_ = LayerPrecision::FP32;
  Tensor x_saved_;  // (M, K) in the forward precision
  Tensor w_saved_;  // (N, K) in the forward precision (FP32: the master itself)
  Shape x_shape_;
};

}  // namespace qsync
