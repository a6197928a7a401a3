// File: worker/train_step.h
// One training step of a rank on its device, the same code for CPU and GPU ranks:
//   upload   the loader's host batch and targets reach the device (GPU: pinned staging and
//            asynchronous copies on the compute stream; CPU: the host tensors themselves)
//   compute  zero the gradients, forward, the fused loss (its gradient scaled by the loss
//            scale), backward with the gradient buckets launched as layers finish
//   sync     the gradient sync's finish_step (the wait for the slowest rank)
//   update   the optimizer (unscaled by the loss scale, skipping non-finite steps), then the
//            step's one synchronization of the device: the loss sums, the optimizer's result
//            and the op timings reach the host
//   stats    with the job's collectives: the running statistics (BatchNorm's) made those of the
//            global batch on every rank (worker/dist/running_stats_sync.h)
// Phase times come from the device's timeline (host clock on CPUs, CUDA events on GPUs).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "worker/dist/gradient_sync.h"
#include "worker/loss.h"
#include "worker/loss_scale.h"
#include "worker/model.h"
#include "worker/optimizer.h"

namespace qsync {

struct StepOutcome {
  double loss_sum = 0;
  int64_t correct = 0;
  bool skipped = false;  // loss scaling found a non-finite gradient: no update
  double compute_seconds = 0, wait_seconds = 0, allreduce_seconds = 0, optimizer_seconds = 0;
};

class RankStep {
 public:
  // The batch tensors are (batch_shape) FP32 and (positions) int32 on the model's device.
  // `collectives`: the job's (more than one rank), for the running statistics; nullptr: one rank.
  RankStep(Model& model, Optimizer& opt, GradientSync* sync, LossScaler& scaler, const Shape& batch_shape,
           int64_t positions, MemoryAccount* memory, Collectives* collectives = nullptr);
  ~RankStep();
  RankStep(const RankStep&) = delete;
  RankStep& operator=(const RankStep&) = delete;

  // The host batch the loader fills (pinned on GPU ranks) and the targets.
  Tensor& host_batch() { return x_host_; }
  std::vector<int32_t>& host_targets() { return targets_; }

  // One step (ctx.step set by the caller) on host_batch() / host_targets().
  StepOutcome run(StepContext& ctx, float loss_divisor);
  // Called between the forward and the loss (the profiler reads the layers' saved bytes there).
  std::function<void()> after_forward;

  // Uploads a host batch of any batch size for evaluation and returns its device copy and targets.
  Tensor upload(const Tensor& x, const std::vector<int32_t>& targets, Tensor& device_targets);

 private:
  Model& model_;
  Optimizer& opt_;
  GradientSync* sync_;
  Collectives* collectives_;
  LossScaler& scaler_;
  MemoryAccount* memory_;
  Tensor x_host_, targets_host_;  // pinned on GPU ranks (registered host memory)
  Tensor x_dev_, targets_dev_;
  std::vector<int32_t> targets_;
  std::vector<void*> registered_;  // host memory page-locked for the device (unregistered at the end)
};

}  // namespace qsync
