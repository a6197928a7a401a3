// File: worker/model.h
// A trainable model: the layers built from a model description, their parameters, the plan
// applied to them, and one training step's forward and backward.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "planner/model_desc.h"
#include "planner/plan_file.h"
#include "worker/layer.h"

namespace qsync {

class Model {
 public:
  // Builds every layer; parameters are charged to `memory` and initialized from `seed`
  // (the same seed gives the same weights on every rank).
  Model(const ModelDesc& desc, MemoryAccount* memory, uint64_t seed);

  const ModelDesc& desc() const { return desc_; }
  const std::vector<Parameter*>& parameters() const { return parameters_; }
  int64_t parameter_count() const;

  // Sets every GEMM-like layer's precision from the plan (validated against the model).
  void apply_plan(const RankPlan& plan);

  // x: (B, input_shape...) FP32 (token ids as floats for token models). Returns the logits:
  // (B, classes) or (B, T, vocab).
  Tensor forward(const Tensor& x, StepContext& ctx);
  // dlogits: the loss gradient; accumulates every parameter's grad.
  void backward(const Tensor& dlogits, StepContext& ctx);
  void zero_grad();
  int64_t saved_bytes() const { return root_->saved_bytes(); }
  // Every layer, depth first in forward order: a container before its children, an attention
  // layer before its qkv and proj projections (per-layer profiling: saved bytes by name).
  void visit_layers(const std::function<void(Layer&)>& f);

  // FNV-1a over the parameter values: a cheap cross-rank weight-equality check.
  uint64_t weight_hash() const;

 private:
  ModelDesc desc_;
  std::unique_ptr<Layer> root_;
  std::vector<Parameter*> parameters_;
};

}  // namespace qsync
