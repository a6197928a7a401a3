// File: worker/trainer.h
// The training loop of one worker: load model, plan and data, run as a device class, train for
// steps or epochs with periodic evaluation and checkpoints, resume from the last checkpoint, and
// report a summary (also as JSON).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "worker/checkpoint_store.h"
#include "worker/dist/gradient_sync.h"
#include "worker/dist/link_model.h"
#include "worker/dist/rendezvous.h"
#include "worker/optimizer.h"

namespace qsync {

struct TrainConfig {
  std::string model;      // zoo name or model file
  std::string data;       // Fashion-MNIST dir (image models) or text file (token models)
  std::string plan_path;  // per-layer precisions; empty: fp32 everywhere
  std::string precision;  // uniform precision for every GEMM layer (when no plan is given)
  int64_t steps = 0;      // one of steps / epochs (steps wins)
  double epochs = 0;
  int64_t batch = 128;
  OptimizerConfig optimizer;
  uint64_t seed = 1;
  int64_t eval_every = 0;  // 0: only at the end
  int64_t eval_limit = 0;  // cap on evaluation samples (0: the whole test set)
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;  // 0: only at the end (when a dir is given)
  int64_t keep_checkpoints = DEFAULT_KEEP_CHECKPOINTS;  // --keep-checkpoints: step-<N>.qckpt files kept (worker/checkpoint_store.h)
  bool resume = false;
  std::string summary_json;
  // --termination-log: at exit (end, stop on a signal, or error) a one-line JSON under 4 KiB,
  // {"steps", "checkpointStep", "stoppedEarly", "error"}, for Kubernetes' terminationMessagePath.
  std::string termination_log;
  std::string device_class;  // empty: the strongest CPU class available; gpu-*: a GPU (LOCAL_RANK)
  // --loss-scale: "auto" (dynamic when a GPU rank of the job runs a backward in FP16), "dynamic"
  // or "none" (worker/loss_scale.h).
  std::string loss_scaling = "auto";
  // --profiles DIR: measured device profiles for the summary's prediction of this rank's step and
  // peak memory (planner/replayer.h); without one, GPU classes use their estimates.
  std::string profiles_dir;
  int threads = 1;
  int64_t memory_budget = 0;  // bytes; 0: unlimited
  int64_t log_every = 50;
  bool quiet = false;
  bool op_times = false;  // print where a step's time goes, per op, at the end
  bool log_json = false;  // progress as JSON lines (one per step and rank), for `qsync run`
  std::string metrics_address = "127.0.0.1";
  int metrics_port = -1;  // -1: no metrics endpoint
  std::string job_name = "local";

  // Data parallelism. The world comes from MASTER_ADDR / MASTER_PORT / RANK / WORLD_SIZE; these
  // override the environment when set (>= 0 / non-empty). `batch` is the global batch, split
  // evenly unless the plan gives this rank's local batch.
  int rank = -1, world_size = -1, master_port = -1;
  std::string master_addr;
  int64_t bucket_bytes = DEFAULT_BUCKET_BYTES;
  int64_t weight_hash_every = 0;     // debug: compare a weight hash across ranks every N steps
  double collective_timeout_seconds = 60;
  LinkModel link;  // --link: emulated slow link on every collective (disabled: loopback as it is)
};

struct EvalResult {
  double loss = 0, accuracy = 0;
  int64_t samples = 0;
};

// Steps of a run not counted in its steady-state page faults (oneDNN primitives, first touches).
inline constexpr int64_t STEADY_STATE_WARMUP_STEPS = 5;

struct TrainSummary {
  std::string model, device_class;
  std::string device;        // what the rank computed on ("host CPU", or the GPU and its libraries)
  std::string loss_scaling;  // "none" | "dynamic"
  int64_t device_peak_bytes = 0;  // GPU ranks: the device pool's high-water mark (0 on CPUs)
  int64_t skipped_steps = 0;      // steps loss scaling skipped (non-finite gradients)
  double final_loss_scale = 0;    // 0 without loss scaling
  // The planner's prediction for this rank alone (its profile replayed at its plan and batch):
  // compute seconds and peak memory; 0 when no profile or estimate exists for the class.
  double predicted_compute_seconds = 0;
  int64_t predicted_peak_memory_bytes = 0;
  int rank = 0, world_size = 1;
  int64_t local_batch = 0, global_batch = 0;
  double median_compute_seconds = 0, median_wait_seconds = 0, median_allreduce_seconds = 0;
  // After the gradients are in: the optimizer step, then the step's stats all-reduce (the loss,
  // accuracy and stop flag; it waits for the slowest rank's optimizer).
  double median_optimizer_seconds = 0, median_stats_seconds = 0;
  bool stopped_early = false;  // a signal asked the job to checkpoint and stop
  uint64_t weight_hash = 0;    // of the final weights: equal on every rank of a job
  int64_t steps = 0, start_step = 0;
  double final_train_loss = 0, final_test_loss = 0, final_test_accuracy = 0, final_perplexity = 0;
  double samples_per_second = 0, median_step_seconds = 0, wall_seconds = 0;
  int64_t peak_memory_bytes = 0, parameter_count = 0;
  // Minor page faults (getrusage, the whole process) per training step after the first
  // STEADY_STATE_WARMUP_STEPS of this run (-1: too few steps): 0 when activations and workspaces
  // are reused across steps. steady_steps_with_page_faults: how many of those steps took any (a
  // per-step allocation faults in every step; a one-off, e.g. a library's late first touch, in
  // one). first_step_minor_page_faults: those of the run's first step.
  double steady_minor_page_faults_per_step = -1;
  int64_t steady_steps_with_page_faults = -1;
  int64_t first_step_minor_page_faults = 0;
  std::vector<double> losses;  // per step trained in this run
  std::string plan_summary;    // "conv1=int8 conv2=fp32 ..."
  // --op-times: each op's mean seconds and calls per training step over op_time_steps, the steps
  // after the first of this run (its oneDNN primitives are created then); evaluations excluded.
  // Empty without --op-times.
  std::map<std::string, std::pair<double, double>> op_times;  // op -> (seconds, calls) per step
  int64_t op_time_steps = 0;
};

// Trains; in a data-parallel job every rank calls this with its own rank. Throws on bad input,
// and CollectiveError when a peer rank fails (within the collective timeout).
TrainSummary train_run(const TrainConfig& config);
// What a run reports at exit through --termination-log. checkpoint_step: the step of the last
// checkpoint this run wrote or resumed from (0: none).
struct TerminationReport {
  int64_t steps = 0, checkpoint_step = 0;
  bool stopped_early = false;
  std::string error;  // empty: no error
};
// The one-line JSON (under 4096 bytes: a long error is cut) of a report.
std::string termination_report_json(const TerminationReport& r);
// Writes it to `path`: temp file + rename where the directory allows, else an overwrite in place
// (Kubernetes bind-mounts /dev/termination-log as a single file). Throws naming the path.
void termination_report_write(const TerminationReport& r, const std::string& path);
// Writes the summary JSON (fields: final_test_accuracy, final_train_loss, steps,
// samples_per_second, median_step_seconds, peak_memory_bytes, ...).
void train_summary_write_json(const TrainSummary& s, const std::string& path);

}  // namespace qsync
