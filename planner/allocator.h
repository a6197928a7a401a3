// File: planner/allocator.h
// The allocator: given a job (model, global batch) and a pool (device classes with their
// profiles and memory budgets), chooses per-rank layer precisions and local batches that
// minimize the total indicator subject to every rank's memory budget and to the predicted step
// time not exceeding a target (default: the step time of the training devices at their default
// high precision, see below). Strategies: "exact" (per rank, dynamic programming over the
// layers with every gradient bucket's deadline and the memory budget: planner/allocator_solver.h,
// optimal up to a stated time-discretization gap), "greedy"
// (QSync's: start low, raise layers one level at a time by indicator reduction while memory and
// step time hold), and the baselines users compare against: "uniform" (one precision
// everywhere), "uniform-low-weak" (the weak ranks at one low precision), "dynamic-batching"
// (local batches proportional to speed, no quantization). Going further than QSync: with
// `allow_batch_moves`, a little batch may move between ranks when that buys back precision.
//
// Training devices: the ranks whose compute time (forward + backward + optimizer) at uniform
// `high` and their local batch is within 10 % of the fastest rank's. Default target: the step
// time the job would have at uniform `high` if every other rank kept pace, i.e. never delayed a
// gradient bucket: max over training ranks of their step bound (allocator_model.h), which
// includes the pool's all-reduce and the slowest optimizer step after it (weights, gradients and
// optimizer state stay FP32, so no precision choice shortens that).
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "planner/device_profile.h"
#include "planner/indicator.h"
#include "planner/plan_file.h"
#include "planner/replayer.h"

namespace qsync {

struct PoolRank {
  std::string device_class;
  DeviceProfile profile;
  int64_t memory_budget_bytes = 0;  // 0: unlimited
  std::string node;                 // where it runs (informational)
  int64_t local_batch = 0;          // 0: the global batch split evenly (as the worker does)
  std::optional<LayerPrecision> precision;  // "uniform": this rank's precision instead of `high`
};

struct AllocationRequest {
  ModelDesc model;
  int64_t global_batch = 0;
  std::vector<PoolRank> pool;
  CommProfile comm;
  IndicatorTable indicator;
  int64_t bucket_bytes = 25ll << 20;
  double step_time_target = 0;     // 0: the default target above
  LayerPrecision high = LayerPrecision::FP32;  // the training devices' default precision
  LayerPrecision low = LayerPrecision::INT8;   // uniform-low-weak's precision
  bool allow_batch_moves = false;
  int time_bins = 0;  // exact: time bins of the DP (0: chain_default_bins(GEMM layers))
};

struct Allocation {
  std::string strategy;
  std::vector<RankPlan> plans;      // one per pool rank (rank, device_class, local_batch set)
  StepPrediction predicted;
  double total_indicator = 0;
  double step_time_target = 0;
  bool meets_target = false;
  bool fits_memory = true;          // every rank's predicted peak within its budget
  std::vector<size_t> training_ranks;  // the ranks taken as training devices
  std::vector<double> rank_indicator;  // per rank: its layers' indicator sum (NaN: unscored precision)
  std::vector<std::string> notes;   // what the strategy could not do, and why
};

// Whether predicted step p meets `target` (seconds): the target bounds the planned step; the
// spread of the ranks' steps (StepPrediction::jitter_seconds) is not the plan's to meet.
bool step_meets_target(const StepPrediction& p, double target);

// Strategies: "exact", "greedy", "uniform", "uniform-low-weak", "dynamic-batching".
// Throws std::invalid_argument for an unknown strategy (listing them) and InfeasiblePlan when a
// device cannot fit the model even at its lowest precision (naming the device and the smallest
// memory that would fit).
class InfeasiblePlan : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
Allocation allocate(const AllocationRequest& request, const std::string& strategy);
std::vector<std::string> allocator_strategies();

// A fallback indicator for when no calibration statistics exist: a precision's aggressiveness
// (layer_precision_traits) times the layer's share of the GEMM parameters. It only ranks
// choices; it does not measure how much they perturb training (`qsync-worker calibrate` does).
IndicatorTable indicator_fallback_table(const ModelDesc& model);

}  // namespace qsync
