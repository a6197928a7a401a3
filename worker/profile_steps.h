// File: worker/profile_steps.h
// The stepping of `qsync-worker profile` (profiler.cpp): one model trained as training trains it,
// in the profile's world, a precision at a time. A turn applies a uniform plan, discards a
// warm-up step and records every op of the next `steps` steps in that precision's samples; in a
// world every step synchronizes its gradients and ends with the step's stats all-reduce, as
// training's do. Where the world's ranks share the CPUs, each round ends with a block of whole
// FP32 steps (SHARED_WORLD_BLOCK_*), the world's step.
//
//   ProfileSteps steps(config, desc, device, ops, coll, runs.size());
//   for (round ...) { for (turn < steps.turns()) steps.run_turn(runs[turn % runs.size()], ...); }
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/device_class.h"
#include "worker/dist/collectives.h"
#include "worker/dist/gradient_sync.h"
#include "worker/loss_scale.h"
#include "worker/model.h"
#include "worker/optimizer.h"
#include "worker/profile_charges.h"
#include "worker/profiler.h"
#include "worker/train_data.h"
#include "worker/train_step.h"

namespace qsync {

// Training batches: the real data when a path is given, else synthetic ones of the same shape
// (uniform pixels or token ids; the costs do not depend on the values).
class ProfileBatches {
 public:
  ProfileBatches(const ModelDesc& m, const std::string& data, int64_t batch, uint64_t seed);
  // The next batch into the step's host buffers.
  void next(Tensor& x, std::vector<int32_t>& targets);
  int64_t positions_per_sample() const { return positions_; }

 private:
  std::mt19937_64 rng_;
  Tensor x_;                      // (B, input shape)
  std::vector<int32_t> targets_;  // (B * positions)
  int64_t positions_ = 1;
  std::unique_ptr<TrainingData> loader_;
};

class ProfileSteps {
 public:
  // `runs`: how many precisions this rank measures. In a world, every rank learns the most any
  // rank measures (turns()): the ranks step together, so each takes that many turns a round.
  ProfileSteps(const ProfileConfig& c, const ModelDesc& desc, const DeviceClass& device, DeviceOps& ops,
               Collectives* coll, size_t runs);
  ProfileSteps(const ProfileSteps&) = delete;
  ProfileSteps& operator=(const ProfileSteps&) = delete;

  size_t turns() const { return turns_; }
  // One precision's turn. In the first round it also records each layer's saved bytes and the
  // poolings the convolutions ran. `world_turn`: in a world not sharing the CPUs, the round's
  // first turn (FP32 on every rank) is the world's uniform FP32 step, its waits included.
  void run_turn(PrecisionRun& run, bool first_round, bool world_turn);
  // Where the ranks share the CPUs: the round's block of whole FP32 steps (rank 0's clock decides
  // its length).
  void run_world_fp32_block();

  Model& model() { return model_; }
  Optimizer& optimizer() { return opt_; }
  StepContext& context() { return ctx_; }
  // Every measured step's optimizer seconds; the FP32 turns' compute + optimizer seconds; the
  // world's whole FP32 steps; the FP32 turns' peak memory.
  const std::vector<double>& optimizer_seconds() const { return optimizer_seconds_; }
  const std::vector<double>& fp32_step_seconds() const { return fp32_step_seconds_; }
  const std::vector<double>& world_step_seconds() const { return world_step_seconds_; }
  int64_t fp32_peak_bytes() const { return fp32_peak_bytes_; }

 private:
  // One step as training runs it, in a world ended by the step's stats all-reduce; its whole
  // seconds, the waits included. `more`: this rank's vote, carried by that all-reduce, to go on
  // stepping; returned in it, whether any rank voted so (every rank gets the same answer).
  double run_step(StepOutcome& out, bool* more = nullptr);

  const ProfileConfig& c_;
  const ModelDesc& desc_;
  Collectives* coll_;  // null alone
  MemoryAccount memory_;
  Model model_;
  Optimizer opt_;
  ProfileBatches batches_;
  StepContext ctx_;
  std::unique_ptr<GradientSync> sync_;
  LossScaler no_scaling_;
  RankStep step_runner_;
  float divisor_;
  int64_t step_ = 0;
  size_t turns_;
  std::vector<double> optimizer_seconds_, fp32_step_seconds_, world_step_seconds_;
  int64_t fp32_peak_bytes_ = 0;
};

}  // namespace qsync
