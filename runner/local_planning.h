// File: runner/local_planning.h
// The planning half of `qsync run`: makes sure the measurements the planner needs exist (device
// profiles per class and local batch, the all-reduce profile, calibration statistics for the
// indicator-driven strategies), measuring what is missing once with this build's binaries and
// keeping the results for the next run, then runs the allocator over the job's local pool.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/allocator.h"
#include "planner/job_spec.h"

namespace qsync {

struct LocalPlanning {
  Allocation allocation;
  nlohmann::json summary;  // strategy, indicator source, predicted step and target, per-rank predictions
};

struct LocalPlanningInputs {
  std::string work_dir;       // logs/ for the measuring commands; calibration/ and profiles/ by default
  std::string bin_dir;        // where qsync-worker and qsync-bench-allreduce are
  std::string allocator;      // overrides the job's
  std::string profiles_dir;   // overrides the job's planning.profiles
  std::string plans_dir;      // rank-R.yaml plan files to run instead of allocating ("": allocate);
                              // their prediction is the replayer's over the (scaled) profiles
  int profile_rounds = 0;     // > 0: `qsync-worker profile --rounds` (fewer: quicker, noisier)
  std::function<void(const std::string&)> say;  // progress messages
  std::vector<std::vector<int>> rank_cpus;      // per rank, the CPUs it runs on (empty: not pinned);
                                                // a class's profile is measured on its first rank's
};

// With plans_dir, the ranks' plans are read from it: the measured profiles serve them at any
// local batch (scaled from the nearest profiled one, never re-measured), and no calibration is
// collected. Throws std::runtime_error when a measuring command fails (naming it and its log) and what
// local_plan_request / allocate throw (InfeasiblePlan included).
LocalPlanning plan_local_job(const JobFile& job, const LocalPlanningInputs& inputs);

// A free TCP port on 127.0.0.1 (for a rendezvous); throws std::runtime_error when none is.
int free_loopback_port();

// Per-rank prediction as the run summary shows it.
nlohmann::json rank_prediction_json(const RankPrediction& p);

}  // namespace qsync
