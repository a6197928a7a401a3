// File: planner/allocator_model.h
// The allocator's view of a job (internal to the allocator's files): per rank, every GEMM
// layer's candidate precisions with their seconds, bytes and indicator at the rank's local batch
// (from its profile scaled to that batch), the fixed costs of the other leaves, and the per-rank
// step bound that decouples the ranks exactly:
//
//   bound(r) = max(backward_end(r) + optimizer(r), chain_end(r) + max_s optimizer(s))
//
// where chain_end(r) is the end of the all-reduce chain if rank r were the only one (bucket k
// starts at max(r's ready time of k, end of bucket k-1)). The job's replayed step time equals
// max_r bound(r): the chain is a max-plus recurrence, so the chain over the ranks' latest ready
// times ends at the max of the single-rank chains, and each rank's step ends at
// max(backward_end, chain end) + its optimizer. So "step time <= target" is exactly
// "bound(r) <= target for every r", and ranks couple only through the target.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "planner/allocator.h"
#include "planner/replay_timeline.h"

namespace qsync {

struct GemmOption {
  LayerPrecision precision = LayerPrecision::FP32;
  double forward = 0, backward = 0;  // seconds at the rank's local batch, casts included
  int64_t memory = 0;                // saved activations + weight copy
  double indicator = 0;              // NaN: the indicator table does not score this precision
  double seconds() const { return forward + backward; }
};

struct GemmSlot {
  const LayerDesc* layer = nullptr;
  size_t leaf = 0;                  // the leaf it runs in (attention's qkv/proj: the attention)
  std::vector<GemmOption> options;  // the profiled precisions, least aggressive first (fp32 first)
};

using Choice = std::vector<int>;  // an option index per GEMM slot

struct RankModel {
  size_t rank = 0;
  std::string device_class;
  int64_t local_batch = 0;
  int64_t memory_budget = 0;  // 0: unlimited
  std::vector<double> fixed_forward, fixed_backward;  // per leaf: everything but the GEMM slots
  int64_t fixed_memory = 0;   // static bytes + other leaves' saved activations
  double optimizer = 0;       // the optimizer step, plus the gradient copies out of the buckets before it
  double fixed_before_last_bucket = 0;  // backward seconds of the parameterless leaves before the last bucket's
  std::vector<GemmSlot> slots;
};

struct JobModel {
  const AllocationRequest* request = nullptr;
  std::vector<const LayerDesc*> leaves;
  std::vector<int64_t> leaf_params;
  std::vector<GradientBucket> buckets;  // none for a single rank
  std::vector<RankModel> ranks;
  double optimizer_max = 0;
};

// Local batches as the worker resolves them: the rank's own, else the global batch split evenly.
std::vector<int64_t> resolve_local_batches(const AllocationRequest& req);
JobModel job_model(const AllocationRequest& req, const std::vector<int64_t>& local_batches);
RankModel rank_model(const JobModel& job, size_t rank, int64_t local_batch);

struct RankEvaluation {
  double bound = 0;          // see above
  double backward_end = 0;
  double compute = 0;        // forward + backward + optimizer
  int64_t memory = 0;        // peak bytes
  double indicator = 0;
};
RankEvaluation evaluate_rank(const JobModel& job, const RankModel& rank, const Choice& choice);
bool fits_memory(const RankModel& rank, int64_t memory);

// The option of each slot closest in aggressiveness to `p` (p itself where profiled; ties go to
// the more aggressive one). `exact_only`: -1 in every slot lacking p instead.
Choice choice_at(const RankModel& rank, LayerPrecision p, bool exact_only = false);
bool choice_complete(const Choice& c);
// Throws InfeasiblePlan when the rank cannot hold the model at its least-memory choices.
void check_memory_feasible(const RankModel& rank);
// The uniform-high compute times; the training ranks (within 10 % of the fastest); the target.
std::vector<size_t> training_ranks(const JobModel& job);
double default_target(const JobModel& job, const std::vector<size_t>& training);

// Builds the allocation: plans, the replayed prediction (replay_step), totals, flags.
Allocation finish_allocation(const JobModel& job, const std::string& strategy, const std::vector<Choice>& choices,
                             double target, const std::vector<size_t>& training, std::vector<std::string> notes);

// The strategies (allocator_exact.cpp, allocator_greedy.cpp). greedy_rank: one rank's greedy
// plan (`met` false when no start meets the target: then its fastest plan).
Choice greedy_rank(const JobModel& job, const RankModel& rank, double target, bool& met);
std::vector<Choice> allocate_exact(JobModel& job, double target, std::vector<std::string>& notes);
std::vector<Choice> allocate_greedy(const JobModel& job, double target, std::vector<std::string>& notes);
// Within the target, allowing for rounding (a training rank's bound can equal the target).
inline bool within_target(double seconds, double target) { return seconds <= target * (1 + 1e-12); }
// The least-time choice (forward + backward) within the rank's memory budget among scored options.
Choice fastest_choice(const JobModel& job, const RankModel& rank);
// Exact for one rank: the least-indicator choice whose bound stays within target (and memory);
// when none does, the fastest choice within memory (with `met` false).
Choice solve_rank_exact(const JobModel& job, const RankModel& rank, double target, bool& met, bool& certified);

}  // namespace qsync
