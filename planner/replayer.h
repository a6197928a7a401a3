// File: planner/replayer.h
// The replayer: predicts one synchronous data-parallel step of a job under per-rank plans. For
// each rank it builds the op sequence of a step from its device profile (forward ops in order,
// each GEMM layer at its planned precision with its own casts included in its profiled cost:
// layer outputs are FP32, so every GEMM layer casts its FP32 input itself; backward ops in
// reverse, gradient buckets in reverse parameter order of about bucket_bytes whose all-reduce
// starts when their last gradient is ready, on a communication stream, then the optimizer step
// once the last all-reduce is done). Every bucket's all-reduce starts on all ranks when the
// slowest rank has it ready (cross-rank synchronization) and takes the comm profile's time.
// Returns the job's step time and per rank its compute time, wait time and peak memory.
// replayer.cpp documents the exact timing rules; replay_timeline.h has the building blocks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/device_profile.h"
#include "planner/model_desc.h"
#include "planner/plan_file.h"

namespace qsync {

struct ReplayRank {
  const DeviceProfile* profile = nullptr;  // of this rank's class (any batch: scaled to local_batch)
  RankPlan plan;                            // precisions and local_batch (> 0)
};

struct RankPrediction {
  double compute_seconds = 0;   // forward + backward + casts + optimizer on this rank
  double optimizer_seconds = 0; // the optimizer's part of compute_seconds
  double wait_seconds = 0;      // idle at bucket syncs waiting for slower ranks / the network
  double step_seconds = 0;      // end of this rank's step
  int64_t peak_memory_bytes = 0;  // static bytes + saved activations (+ weight copies) at peak
  double backward_end_seconds = 0;  // forward + backward: when the rank's compute reaches the sync
};

struct StepPrediction {
  double step_seconds = 0;  // max over ranks, jitter_seconds included
  // What the ranks' step-to-step spread adds (DeviceProfile::step_jitter): the expected latest
  // arrival at the gradient sync beyond the latest mean arrival. 0 for one rank.
  double jitter_seconds = 0;
  double allreduce_end_seconds = 0;  // end of the last bucket's all-reduce (0: no sync)
  std::vector<RankPrediction> ranks;
};

StepPrediction replay_step(const ModelDesc& model, const std::vector<ReplayRank>& ranks, const CommProfile& comm,
                           int64_t bucket_bytes);

// The replayer's own account of a whole uniform FP32 step of profile `p` at its batch, without its
// residual (DeviceProfile::step_overhead_seconds), replayed in a world of `world_size` ranks
// alike: the world the profiler measured it in, where the step also copied its gradients into the
// all-reduce buckets, which the replay charges on its own. The profiler's residual is the
// measured FP32 step (compute and optimizer) less this prediction's compute_seconds.
RankPrediction replay_profile_fp32_step(const ModelDesc& model, const DeviceProfile& p, int world_size,
                                        int64_t bucket_bytes);

// Ranks that share CPUs: planner/shared_cpu_model.h turns this step into theirs.

}  // namespace qsync
