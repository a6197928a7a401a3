// File: planner/worker_command.h
// THE command line of `qsync-worker train` for one rank of a job: `qsync run` (runner/) and the
// operator's pods (operator/reconciler/desired_children.cpp) both build it here, so the job's
// fields reach every worker the same way. Numbers are written in their shortest round-trip
// decimal form (1e-07, not 0.000000), so the worker reads exactly the job's value.
//
//   WorkerLaunch launch;  launch.binary = "qsync-worker"; launch.plan_file = "plans/rank-0.yaml"; ...
//   std::vector<std::string> argv = worker_train_command(job_name, spec, launch);
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/job_spec.h"

namespace qsync {

// What differs between a local process and a pod: where things are, as the worker sees them.
struct WorkerLaunch {
  std::string binary = "qsync-worker";
  std::string model;                 // --model: a zoo name or a model file path
  std::string data;                  // --data ("": the model's default dataset)
  std::string plan_file;             // --plan (per-rank precisions and local batch)
  std::string device_class;          // --device-class ("": the worker's default)
  int64_t threads = 0;               // --threads (0: not passed)
  int64_t memory_budget_bytes = 0;   // --memory-budget in MiB (0: none)
  std::string checkpoint_dir;        // --checkpoint-dir ("": no checkpoints)
  bool resume = false;               // --resume (from the newest checkpoint, if any)
  int metrics_port = 0;              // --metrics-port (0: no metrics endpoint)
  std::string summary_json;          // --summary-json
  std::string termination_log;       // --termination-log
  double collective_timeout_seconds = 0;  // --collective-timeout (0: the worker's default)
  int64_t log_every = 0;             // --log-every (0: the worker's default)
};

// qsync-worker's exit codes: 0 done, 1 an error of its own (bad input, a full disk, ...), this one
// when a collective failed (a peer died or the group never formed): a consequence, so whoever
// reports "which rank failed first" (runner/local_runner.cpp) prefers a rank that exited otherwise.
inline constexpr int WORKER_EXIT_COLLECTIVE_FAILED = 3;

// The shortest decimal text that reads back as exactly `v` ("0.002", "1e-07").
std::string number_text(double v);

// argv of `qsync-worker train` (argv[0] = launch.binary).
std::vector<std::string> worker_train_command(const std::string& job_name, const JobSpec& spec, const WorkerLaunch& launch);

}  // namespace qsync
