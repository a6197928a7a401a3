// File: worker/model.h
// A trainable model: the layers built from a model description, their parameters, the plan
// applied to them, and one training step's forward and backward, on the rank's device.
// Parameters and gradients live in two flat FP32 buffers on that device, each parameter a view
// at a 256-byte aligned offset, laid out in reverse parameter order (the order backward finishes
// them): a gradient bucket of consecutive parameters is one contiguous slice.
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
  // Builds every layer; parameters are initialized on the host from `seed` (the same seed gives
  // the same weights on every rank), then placed in the flat buffers on `ops`' device (nullptr:
  // the host), which are charged to `memory`.
  Model(const ModelDesc& desc, MemoryAccount* memory, uint64_t seed, DeviceOps* ops = nullptr);

  const ModelDesc& desc() const { return desc_; }
  DeviceOps& ops() const { return *ops_; }
  const std::vector<Parameter*>& parameters() const { return parameters_; }
  // The layers' running statistics (BatchNorm's), in forward order: checkpointed, synchronized.
  const std::vector<RunningStatistics*>& running_statistics() const { return running_statistics_; }
  // The flat buffers (elements, padding included) and a parameter's offset in them.
  const Tensor& flat_values() const { return values_; }
  Tensor& flat_gradients() { return grads_; }
  int64_t offset_of(const Parameter* p) const;
  // Elements between parameters so that each starts 256-byte aligned.
  static constexpr int64_t PARAMETER_ALIGNMENT = 64;
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

  // FNV-1a over the parameter values (their bytes, in parameter order): a cheap cross-rank
  // weight-equality check, the same on every device (a device's values are copied to the host).
  uint64_t weight_hash() const;

 private:
  void place_parameters(MemoryAccount* memory);

  ModelDesc desc_;
  DeviceOps* ops_;
  std::unique_ptr<Layer> root_;
  std::vector<Parameter*> parameters_;
  std::vector<RunningStatistics*> running_statistics_;
  std::vector<int64_t> offsets_;  // per parameter (parameters_ order), elements into the flat buffers
  Tensor values_, grads_;         // (total) FP32 each
};

}  // namespace qsync
