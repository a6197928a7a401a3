// File: planner/local_plan.h
// Planning a job's local pool (spec.pool.local): the one place that turns a job file, a profile
// store and calibration statistics into an AllocationRequest, shared by `qsync-plan` and
// `qsync run`. A local pool runs where the planner runs, so a CPU class this CPU lacks is
// planned as the class it will run as (device_class_fallback), with a note saying so.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "planner/allocator.h"
#include "planner/job_spec.h"

namespace qsync {

// Overrides of the job's planning section (empty / zero: the job's value).
struct LocalPlanOptions {
  std::string strategy;          // exact | greedy | uniform | uniform-low-weak | dynamic-batching
  std::string calibration;       // calibration stats (`qsync-worker calibrate`)
  std::string indicator_kind;    // bidirectional | weight-error
  double step_time_target = 0;   // seconds
  std::string high, low;         // precisions
  std::optional<bool> batch_moves;  // unset: the job's planning.batchMoves
  int64_t bucket_bytes = 25ll << 20;
};

struct LocalPlanRequest {
  AllocationRequest request;
  std::string strategy;
  std::string indicator_source;    // "bidirectional (FILE)", or "fallback" (no calibration stats)
  std::vector<std::string> notes;  // e.g. "rank 0: cpu-amx is not available on this CPU; planned as cpu-avx512"
};

// The class a local worker of `requested` runs as on this machine (estimated GPU classes: itself).
std::string local_run_class(const std::string& requested);
// Rank r's local batch: its localBatch, else the global batch split evenly (as the worker does).
int64_t local_batch_of(const JobSpec& job, size_t rank);

// Throws std::invalid_argument for a job without local workers, an unknown class or precision,
// a missing profile (naming the command that measures it) or calibration stats of another model.
LocalPlanRequest local_plan_request(const JobFile& job, const ProfileStore& store, const LocalPlanOptions& options = {});

// The (class, batch) pairs of the pool whose measured profile the store lacks: what `qsync run`
// measures before planning. Estimated GPU classes never need one.
struct ProfileNeed {
  std::string device_class;  // as it runs (local_run_class)
  int64_t batch = 0;
  int threads = 1;
};
std::vector<ProfileNeed> local_missing_profiles(const JobSpec& job, const ModelDesc& model, const ProfileStore& store);

// Whether a strategy ranks precisions by the indicator (and so wants calibration statistics).
bool strategy_uses_indicator(const std::string& strategy);

// The workers whose memoryBudget is below what the model needs at their local batch even at the
// lowest-memory precisions (the allocator's own check, on the model's byte counts: no profile
// needed, so `qsync run` refuses the job before measuring anything). One message per worker.
std::vector<std::string> local_memory_budget_problems(const JobFile& job, const ModelDesc& model);

}  // namespace qsync
