// File: worker/optimizer.h
// Optimizers over FP32 master weights (SGD with momentum and weight decay, AdamW), the learning
// rate schedule (linear warmup, then cosine decay), and global gradient-norm clipping. The
// optimizer state stays FP32 whatever the layers compute in, on the parameters' device; the
// update itself is one op of the rank's ops (DeviceOps::optimizer_step), so every rank of a job,
// CPU or GPU, computes the same global norm (a canonical summation tree) and the same IEEE
// single-precision update of the same summed gradients: their weights stay bitwise equal.
#pragma once

#include <string>
#include <vector>

#include "worker/layer.h"

namespace qsync {

enum class OptimizerKind : uint8_t { SGD, ADAMW };
OptimizerKind optimizer_kind_from_name(const std::string& name);  // "sgd" | "adamw"
const char* optimizer_kind_name(OptimizerKind k);

// The learning rate after warm-up: constant, or cosine decay to lr * min_lr_ratio at total_steps.
enum class LrSchedule : uint8_t { CONSTANT, COSINE };
LrSchedule lr_schedule_from_name(const std::string& name);  // "constant" | "cosine"
const char* lr_schedule_name(LrSchedule s);

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::ADAMW;
  double lr = 1e-3;
  double weight_decay = 0.0;
  double momentum = 0.9;               // SGD
  double beta1 = 0.9, beta2 = 0.999;   // AdamW
  double eps = 1e-8;
  double grad_clip = 0.0;              // max global L2 norm; 0: no clipping
  int64_t warmup_steps = 0;
  int64_t total_steps = 0;             // cosine decay length; 0: constant after warmup
  double min_lr_ratio = 0.1;           // cosine floor, as a fraction of lr
  LrSchedule schedule = LrSchedule::COSINE;
};

class Optimizer {
 public:
  // State on `ops`' device (the parameters'); ops nullptr: the host.
  Optimizer(const OptimizerConfig& config, const std::vector<Parameter*>& params, MemoryAccount* memory,
            DeviceOps* ops = nullptr);
  const OptimizerConfig& config() const { return config_; }

  // The learning rate at `step` (0-based): linear warmup to lr, then constant (CONSTANT) or cosine
  // to lr * min_lr_ratio (COSINE).
  double lr_at(int64_t step) const;
  // Clips (if configured) and applies one update with lr_at(step). Gradients are left as they
  // are (zeroing is the caller's). With loss scaling the gradients carry the loss scale: they are
  // multiplied by inv_loss_scale, and a non-finite global norm skips the whole update
  // (skip_nonfinite). The result (norm, skipped) is valid after the ops' synchronize(); call
  // settle() then, which undoes the update count of a skipped step.
  void step(int64_t step, float inv_loss_scale = 1.0f, bool skip_nonfinite = false);
  const OptimizerStepResult& last_result() const { return result_; }
  void settle();

  // Optimizer state tensors, in a fixed order (for checkpoints): momentum (SGD) or m, v (AdamW)
  // per parameter.
  std::vector<Tensor*> state();
  // Updates applied so far (Adam's bias correction); saved and restored with the state.
  int64_t updates_applied() const { return updates_; }
  void set_updates_applied(int64_t n) { updates_ = n; }

 private:
  OptimizerConfig config_;
  std::vector<Parameter*> params_;
  DeviceOps* ops_;
  std::vector<Tensor> m_, v_;  // (numel) per parameter
  std::vector<OptimizerSlot> slots_;
  int64_t updates_ = 0;        // steps applied, for Adam's bias correction and SGD's first step
  OptimizerStepResult result_;
  bool settled_ = true;

};

}  // namespace qsync
