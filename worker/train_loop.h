// File: worker/train_loop.h
// The step loop of a training rank (worker/trainer.cpp sets up what it works on): each step's
// batch, forward and backward with the gradients' all-reduce, optimizer and stats all-reduce;
// the evaluations, checkpoints, telemetry and stop requests between steps; each step's times and
// page faults, of which the summary keeps medians and the steady state.
//
//   StepLoop loop{...};  StepSeries series;
//   const int64_t step = run_steps(loop, summary, series);
//   final_evaluation(loop, summary, step);  series.summarize(summary);
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

#include "worker/dist/collectives.h"
#include "worker/model.h"
#include "worker/op_time_table.h"
#include "worker/stop_signal_watcher.h"
#include "worker/telemetry.h"
#include "worker/train_data.h"
#include "worker/train_events.h"
#include "worker/train_step.h"
#include "worker/trainer.h"

namespace qsync {

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The per-step series of a run and what the summary keeps of them.
struct StepSeries {
  std::vector<double> step, compute, wait, allreduce, optimizer, stats;
  std::vector<int64_t> faults;  // minor page faults of each step (the step itself and its stats)

  // Medians (samples per second from the step's), and the page faults after
  // STEADY_STATE_WARMUP_STEPS (trainer.h).
  void summarize(TrainSummary& s) const;
};

// What the step loop works on.
struct StepLoop {
  const TrainConfig& c;
  const ModelDesc& desc;
  Model& model;
  TrainingData& data;
  RankStep& runner;
  StepContext& ctx;
  Collectives& coll;
  MemoryAccount& memory;
  const StopSignalWatcher& stop;
  TrainEvents& events;
  WorkerTelemetry* metrics;  // null without --metrics-port
  OpTimeTable& op_table;     // --op-times: the training steps after the run's first
  TerminationReport& report;
  std::function<void(int64_t)> save;  // a checkpoint after that many steps
  int64_t total_steps;
  float loss_divisor;  // the global batch's positions: the loss is the global mean
};

// Steps from s.start_step to l.total_steps, or to the step a stop was asked at (then
// s.stopped_early); the step reached. Fills s.losses, final_train_loss and skipped_steps.
int64_t run_steps(StepLoop& l, TrainSummary& s, StepSeries& series);

// The run's last evaluation on rank 0 into s (none after a requested stop: the job resumes).
void final_evaluation(StepLoop& l, TrainSummary& s, int64_t step);

// --op-times: the table over the training steps after the run's first, into s and printed.
void report_op_times(const OpTimeTable& table, TrainSummary& s, TrainEvents& events);

}  // namespace qsync
