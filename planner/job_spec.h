// File: planner/job_spec.h
// The job: what to train, on what data, how long, with what batch, checkpoints and planning
// policy, and on which pool of devices. The same schema as the Kubernetes HybridTrainingJob's
// spec (a job file is a HybridTrainingJob manifest), plus `pool.local` for `qsync run`: a list of
// local worker processes, each running as a device class with a thread count and memory budget.
//
//   apiVersion: qsync.dev/v1alpha1
//   kind: HybridTrainingJob
//   metadata: {name: fmnist-hybrid}
//   spec:
//     model: {zoo: cnn}                       # or {file: path/to/model.yaml}
//     data: {path: /usr/share/datasets/fashion-mnist}
//     optimizer: {name: adamw, lr: 0.002, weightDecay: 0, warmupSteps: 0, gradClip: 0, schedule: cosine}
//     steps: 400                              # or epochs: 1.5
//     globalBatch: 128
//     seed: 1
//     evalLimit: 2000                         # 0: the whole test set
//     evalEvery: 50                           # evaluate every K steps too (0: at the end only)
//     checkpoint: {dir: checkpoints, intervalSteps: 100}
//     planning: {allocator: exact, precision: fp32, stepTimeTarget: 250ms, lowPrecision: int8,
//                indicator: bidirectional, profiles: profiles/, calibration: cnn.calib.json,
//                batchMoves: true}
//     pool:
//       local:
//         - {deviceClass: cpu-amx, threads: 1, memoryBudget: 2Gi}
//         - {deviceClass: cpu-avx2, threads: 1, memoryBudget: 1Gi, precision: int8}
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace qsync {

struct LocalWorkerSpec {
  std::string device_class;
  int threads = 1;
  int64_t memory_budget_bytes = 0;  // 0: unlimited
  std::string precision;            // overrides planning.precision for this worker ("" = none)
  int64_t local_batch = 0;          // 0: the global batch split evenly
};

struct JobSpec {
  std::string name;
  std::string source;  // the file, for messages
  std::string model;   // zoo name or model file path (relative paths resolved against the job file)
  std::string data;    // dataset dir or text file ("" = the model's default)
  std::string optimizer = "adamw";
  double lr = 1e-3, weight_decay = 0, grad_clip = 0;
  int64_t warmup_steps = 0;
  std::string lr_schedule = "cosine";  // constant | cosine (after warm-up)
  int64_t steps = 0;
  double epochs = 0;
  int64_t global_batch = 128;
  uint64_t seed = 1;
  int64_t eval_limit = 0;
  int64_t eval_every = 0;
  std::string checkpoint_dir;  // relative: against the run's work dir
  int64_t checkpoint_interval_steps = 0;
  std::string allocator = "exact";    // exact | greedy | uniform | uniform-low-weak | dynamic-batching
  std::string precision = "fp32";     // the training devices' precision (uniform: every rank's)
  std::string low_precision = "int8"; // uniform-low-weak: the weak ranks' precision
  double step_time_target_seconds = 0;  // 0: the training devices' step time (allocator.h)
  std::string indicator = "bidirectional";  // bidirectional | weight-error
  std::string profiles_dir;           // measured device profiles ("" : `qsync run` measures them)
  std::string calibration;            // calibration stats file ("" : `qsync run` collects them)
  bool batch_moves = true;            // let the allocator move batch between ranks (allocator_exact.cpp)
  std::vector<LocalWorkerSpec> local_workers;
};

// Parses a job file; errors (std::invalid_argument) name the file, the field and the fix.
JobSpec job_spec_load(const std::string& path);
JobSpec job_spec_parse(const std::string& yaml_text, const std::string& source);
// "250ms", "1.5s", "2m", "0.25" (seconds) -> seconds.
double parse_duration_seconds(const std::string& s, const std::string& what);
// "2Gi", "512Mi", "1G", "1000000" -> bytes (Kubernetes quantity suffixes).
int64_t parse_memory_quantity(const std::string& s, const std::string& what);

}  // namespace qsync
