// File: worker/train_events.h
// What a training run tells its user: the start banner, per-step progress, evaluations, messages
// and the final line; as text (a progress line on a terminal, log lines otherwise; rank 0 only)
// or as JSON lines from every rank (`--log-json`, read by `qsync run`):
//   {"event":"step","rank":1,"step":10,"total":400,"loss":0.61,"accuracy":0.78,
//    "step_seconds":0.21,"compute_seconds":0.12,"wait_seconds":0.08,"allreduce_seconds":0.01}
// Also the summary JSON file of a run.
#pragma once

#include <string>

#include "kernels/device_class.h"
#include "planner/model_desc.h"
#include "worker/progress.h"
#include "worker/trainer.h"

namespace qsync {

class TrainEvents {
 public:
  TrainEvents(const TrainConfig& c, int rank, int world_size, int64_t total_steps);
  void start(const ModelDesc& m, const DeviceClass& device, const std::string& data, const TrainSummary& s);
  void step(int64_t step, double loss, double accuracy, double step_seconds, double compute_seconds,
            double wait_seconds, double allreduce_seconds, double global_batch);
  void eval(int64_t step, const EvalResult& e);
  void message(const std::string& line);
  void done(const TrainSummary& s);

 private:
  bool text() const { return !json_ && !quiet_ && rank_ == 0; }
  bool json_, quiet_;
  int rank_, world_size_;
  int64_t total_steps_;
  int64_t log_every_;
  ProgressReporter progress_;
  double elapsed_ = 0;
  int64_t steps_seen_ = 0;
};

}  // namespace qsync
