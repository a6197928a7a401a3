// File: runner/local_runner.h
// `qsync run JOB.yaml`: runs a HybridTrainingJob on this machine. Plans it first (the job's
// planning.allocator, default exact): device profiles missing from the profile directory are
// measured once (`qsync-worker profile`, saved for the next run), as are the all-reduce profile
// (`qsync-bench-allreduce --comm-profile`, when built) and, for the indicator-driven strategies,
// calibration statistics (`qsync-worker calibrate`). Writes one plan per rank,
// spawns one qsync-worker process per local worker of the pool with the rendezvous variables
// (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE), shows one combined progress line from the
// workers' JSON-line events (each rank pinned to CPUs of its own when the pool's threads fit
// the machine: runner/cpu_pinning.h), forwards Ctrl-C (workers checkpoint and exit), reports the rank that
// failed first, and ends with a per-rank summary table (and JSON).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/job_spec.h"

namespace qsync {

struct RunOptions {
  std::string job_path;
  std::string work_dir;      // plans, logs, summaries, checkpoints; default qsync-runs/<job name>
  std::string worker_binary; // default: qsync-worker beside this binary
  int master_port = 0;       // 0: a free loopback port
  std::string summary_json;
  bool resume = false;       // continue from the job's checkpoint
  bool quiet = false;
  double collective_timeout_seconds = 60;
  std::string allocator;     // overrides the job's planning.allocator
  std::string profiles_dir;  // overrides the job's planning.profiles (default <work dir>/profiles)
  int metrics_base_port = 0; // > 0: rank r's worker serves Prometheus /metrics on port P + r
  bool pin_cpus = true;      // each rank (and its profiling) on CPUs of its own (runner/cpu_pinning.h)
  int profile_rounds = 0;    // > 0: rounds of the profiles it measures (qsync-worker profile --rounds)
  std::string plans_dir;     // run the rank-R.yaml plans there instead of planning (qsync run --plans)
  int64_t steps = 0;         // > 0: train this many steps instead of the job's steps/epochs
  bool checkpoints = true;   // false: no checkpoints (and no --resume), whatever the job says
};

struct RankOutcome {
  int rank = 0;
  std::string device_class, requested_class, note;
  std::string cpus;         // the CPUs it was pinned to ("0-1"), empty when not pinned
  int exit_code = -1;
  std::string error;        // last lines of stderr when it failed
  nlohmann::json summary;   // the worker's summary JSON (when it finished)
  nlohmann::json predicted; // the planner's prediction for this rank (step, compute, wait, memory)
};

struct RunResult {
  int exit_code = 0;        // 0: success; 130: interrupted; 1: a worker failed
  std::vector<RankOutcome> ranks;
  nlohmann::json plan;      // strategy, predicted step, target, indicator, notes
  nlohmann::json summary;   // what --summary-json writes
};

// A worker that exited non-zero, in the order the runner reaped them.
struct ReapedFailure {
  int rank = 0;
  int exit_code = 0;
  bool killed_by_runner = false;  // SIGKILLed past the collective timeout: not a cause
};
// The rank whose failure started it (-1 when none failed). A peer's death makes the others fail
// their collectives soon after, and a rank that fails in its own way (a full disk) can take
// longer to exit than the peer that lost it, so reap order alone can name the wrong rank: the
// first that failed otherwise than by a collective (WORKER_EXIT_COLLECTIVE_FAILED) and was not
// killed by the runner is the cause; failing that, the first reaped.
int rank_that_failed_first(const std::vector<ReapedFailure>& failed);

RunResult run_job_locally(const RunOptions& options);
// qsync-runs/<the job's metadata.name>: where a run works when --work-dir is not given.
std::string default_work_dir(const std::string& job_path);

}  // namespace qsync
