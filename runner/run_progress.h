// File: runner/run_progress.h
// The runner's view of a running job: parses the workers' JSON-line events into one combined
// progress line (global step, loss, accuracy; per rank its step time and the time it waits at
// the gradient sync), and formats the final per-rank summary (table and JSON).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/job_spec.h"
#include "runner/local_runner.h"

namespace qsync {

class RunProgress {
 public:
  RunProgress(bool enabled, int world_size);
  // One line of rank `rank`'s stdout (a JSON event, or anything else: shown as a message).
  void line(int rank, const std::string& text);
  void message(const std::string& text);
  void finish();
  // Rank 0's evaluations so far: [{step, train_seconds, loss, accuracy}], train_seconds being
  // the sum of its step times (evaluation time excluded).
  const nlohmann::json& evals() const { return evals_; }

 private:
  void render();
  struct RankState {
    int64_t step = 0;
    double step_seconds = 0, wait_seconds = 0;
    std::string device_class;
  };
  bool enabled_, tty_, line_open_ = false;
  std::vector<RankState> ranks_;
  int64_t total_ = 0, last_logged_ = 0;
  double loss_ = 0, accuracy_ = 0;
  nlohmann::json evals_ = nlohmann::json::array();
  // The ETA counts from the first step seen (planning and startup are not training time).
  std::chrono::steady_clock::time_point first_step_time_;
  int64_t first_step_ = -1;
};

// The run's summary: final_test_accuracy, samples_per_second, and per rank rank, device_class,
// median_step_seconds, median_compute_seconds, median_wait_seconds, peak_memory_bytes, ...
nlohmann::json run_summary_json(const JobFile& job, const std::vector<RankOutcome>& ranks, int first_failure);
// The same as a table for the terminal.
std::string run_summary_table(const nlohmann::json& summary);

}  // namespace qsync
