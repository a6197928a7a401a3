// File: worker/train_events.cpp
// Text and JSON-lines output of a training run, and the summary JSON.
#include "worker/train_events.h"

#include <cstdio>

#include <nlohmann/json.hpp>

#include "planner/atomic_file.h"

namespace qsync {
namespace {

void emit(const nlohmann::json& j) {
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
}

}  // namespace

TrainEvents::TrainEvents(const TrainConfig& c, int rank, int world_size, int64_t total_steps)
    : json_(c.log_json),
      quiet_(c.quiet),
      rank_(rank),
      world_size_(world_size),
      total_steps_(total_steps),
      log_every_(std::max<int64_t>(1, c.log_every)),
      progress_(!c.quiet && !c.log_json && rank == 0 && stdout_is_tty(), c.log_every) {}

void TrainEvents::start(const ModelDesc& m, const DeviceClass& device, const std::string& data, const TrainSummary& s) {
  if (json_) {
    emit({{"event", "start"}, {"rank", rank_}, {"world_size", world_size_}, {"model", m.name},
          {"device_class", device.name}, {"local_batch", s.local_batch}, {"global_batch", s.global_batch},
          {"plan", s.plan_summary}, {"parameters", s.parameter_count}, {"total_steps", total_steps_}});
    return;
  }
  if (!text()) return;
  progress_.message("qsync-worker: " + m.name + " (" + std::to_string(s.parameter_count) + " parameters) on " +
                    device.name + "; " + data);
  if (world_size_ > 1)
    progress_.message("rank 0 of " + std::to_string(world_size_) + ", local batch " + std::to_string(s.local_batch) +
                      " of " + std::to_string(s.global_batch));
  progress_.message("plan: " + s.plan_summary);
}

void TrainEvents::step(int64_t step, double loss, double accuracy, double step_seconds, double compute_seconds,
                       double wait_seconds, double allreduce_seconds, double global_batch) {
  elapsed_ += step_seconds;
  ++steps_seen_;
  if (json_) {
    if (step % log_every_ == 0 || step == total_steps_ || step == 1)
      emit({{"event", "step"}, {"rank", rank_}, {"step", step}, {"total", total_steps_}, {"loss", loss},
            {"accuracy", accuracy}, {"step_seconds", step_seconds}, {"compute_seconds", compute_seconds},
            {"wait_seconds", wait_seconds}, {"allreduce_seconds", allreduce_seconds}});
    return;
  }
  if (!text()) return;
  const double per_step = elapsed_ / double(steps_seen_);
  progress_.step(step, total_steps_, loss, accuracy, global_batch / per_step, per_step * double(total_steps_ - step));
}

void TrainEvents::eval(int64_t step, const EvalResult& e) {
  if (json_) {
    emit({{"event", "eval"}, {"rank", rank_}, {"step", step}, {"train_seconds", elapsed_}, {"loss", e.loss},
          {"accuracy", e.accuracy}});
    return;
  }
  if (text())
    progress_.message("eval at step " + std::to_string(step) + ": loss " + std::to_string(e.loss) + ", accuracy " +
                      std::to_string(e.accuracy * 100.0) + "%");
}

void TrainEvents::message(const std::string& line) {
  if (json_) {
    emit({{"event", "message"}, {"rank", rank_}, {"text", line}});
    return;
  }
  if (text()) progress_.message(line);
}

void TrainEvents::done(const TrainSummary& s) {
  if (json_) {
    emit({{"event", "done"}, {"rank", rank_}, {"steps", s.steps}, {"final_test_accuracy", s.final_test_accuracy},
          {"final_train_loss", s.final_train_loss}, {"median_step_seconds", s.median_step_seconds},
          {"median_wait_seconds", s.median_wait_seconds}, {"peak_memory_bytes", s.peak_memory_bytes}});
    return;
  }
  if (!text()) return;
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "done: %lld steps, train loss %.4f, test loss %.4f, test accuracy %.2f%%, median step %.1f ms "
                "(compute %.1f, wait %.1f), %.0f samples/s, peak memory %s, %.1f page faults/step",
                (long long)s.steps, s.final_train_loss, s.final_test_loss, s.final_test_accuracy * 100.0,
                s.median_step_seconds * 1e3, s.median_compute_seconds * 1e3, s.median_wait_seconds * 1e3,
                s.samples_per_second, format_mib(s.peak_memory_bytes).c_str(),
                s.steady_minor_page_faults_per_step);
  progress_.message(buf);
}

void train_summary_write_json(const TrainSummary& s, const std::string& path) {
  nlohmann::json j = {
      {"model", s.model},
      {"device_class", s.device_class},
      {"device", s.device},
      {"loss_scaling", s.loss_scaling},
      {"device_peak_bytes", s.device_peak_bytes},
      {"skipped_steps", s.skipped_steps},
      {"final_loss_scale", s.final_loss_scale},
      {"predicted_compute_seconds", s.predicted_compute_seconds},
      {"predicted_peak_memory_bytes", s.predicted_peak_memory_bytes},
      {"rank", s.rank},
      {"world_size", s.world_size},
      {"local_batch", s.local_batch},
      {"global_batch", s.global_batch},
      {"steps", s.steps},
      {"start_step", s.start_step},
      {"steady_minor_page_faults_per_step", s.steady_minor_page_faults_per_step},
      {"steady_steps_with_page_faults", s.steady_steps_with_page_faults},
      {"first_step_minor_page_faults", s.first_step_minor_page_faults},
      {"stopped_early", s.stopped_early},
      {"final_train_loss", s.final_train_loss},
      {"final_test_loss", s.final_test_loss},
      {"final_test_accuracy", s.final_test_accuracy},
      {"final_perplexity", s.final_perplexity},
      {"samples_per_second", s.samples_per_second},
      {"median_step_seconds", s.median_step_seconds},
      {"median_compute_seconds", s.median_compute_seconds},
      {"median_wait_seconds", s.median_wait_seconds},
      {"median_allreduce_seconds", s.median_allreduce_seconds},
      {"median_optimizer_seconds", s.median_optimizer_seconds},
      {"median_stats_seconds", s.median_stats_seconds},
      {"wall_seconds", s.wall_seconds},
      {"peak_memory_bytes", s.peak_memory_bytes},
      {"weight_hash", s.weight_hash},
      {"parameter_count", s.parameter_count},
      {"plan", s.plan_summary},
      {"losses", s.losses},
  };
  if (!s.op_times.empty()) {  // --op-times: milliseconds and calls per step, over op_time_steps
    nlohmann::json ops = nlohmann::json::object();
    for (const auto& [op, t] : s.op_times) ops[op] = {{"ms_per_step", t.first * 1e3}, {"calls_per_step", t.second}};
    j["op_times"] = ops;
    j["op_time_steps"] = s.op_time_steps;
  }
  atomic_file_write(path, j.dump(2) + "\n");
}

}  // namespace qsync
