// File: runner/run_progress.cpp
// Combined progress line and run summaries.
#include "runner/run_progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace qsync {

RunProgress::RunProgress(bool enabled, int world_size)
    : enabled_(enabled), tty_(isatty(STDOUT_FILENO) == 1), ranks_(static_cast<size_t>(world_size)) {}

void RunProgress::line(int rank, const std::string& text) {
  const nlohmann::json e = nlohmann::json::parse(text, nullptr, false);
  if (e.is_discarded() || !e.is_object() || !e.contains("event")) {
    message("[rank " + std::to_string(rank) + "] " + text);
    return;
  }
  RankState& r = ranks_[size_t(rank)];
  const std::string kind = e["event"];
  if (kind == "start") {
    r.device_class = e.value("device_class", "");
    total_ = e.value("total_steps", total_);
    if (rank == 0)
      message("model " + e.value("model", std::string()) + ", global batch " + std::to_string(e.value("global_batch", 0)));
    message("rank " + std::to_string(rank) + ": " + r.device_class + ", local batch " +
            std::to_string(e.value("local_batch", 0)) + ", plan: " + e.value("plan", std::string()));
  } else if (kind == "step") {
    r.step = e.value("step", r.step);
    r.step_seconds = e.value("step_seconds", 0.0);
    r.wait_seconds = e.value("wait_seconds", 0.0);
    if (rank == 0) {
      loss_ = e.value("loss", loss_);
      accuracy_ = e.value("accuracy", accuracy_);
    }
    render();
  } else if (kind == "eval") {
    if (rank == 0)
      evals_.push_back({{"step", e.value("step", 0)},
                        {"train_seconds", e.value("train_seconds", 0.0)},
                        {"loss", e.value("loss", 0.0)},
                        {"accuracy", e.value("accuracy", 0.0)}});
    message("eval at step " + std::to_string(e.value("step", 0)) + ": accuracy " +
            std::to_string(e.value("accuracy", 0.0) * 100.0) + "%");
  } else if (kind == "message") {
    message("[rank " + std::to_string(rank) + "] " + e.value("text", std::string()));
  }
}

void RunProgress::render() {
  if (!enabled_) return;
  int64_t step = ranks_[0].step;
  for (const RankState& r : ranks_) step = std::min(step, r.step);
  if (!tty_ && step != total_ && step - last_logged_ < 25) return;
  last_logged_ = step;
  const auto now = std::chrono::steady_clock::now();
  if (first_step_ < 0) first_step_ = step, first_step_time_ = now;
  const double elapsed = std::chrono::duration<double>(now - first_step_time_).count();
  const double eta = step > first_step_ ? elapsed / double(step - first_step_) * double(total_ - step) : 0;
  std::string s = "step " + std::to_string(step) + "/" + std::to_string(total_);
  char buf[128];
  std::snprintf(buf, sizeof buf, "  loss %.4f  acc %.1f%%  ETA %.0fs |", loss_, accuracy_ * 100.0, eta);
  s += buf;
  for (size_t i = 0; i < ranks_.size(); ++i) {
    std::snprintf(buf, sizeof buf, " r%zu %s %.0fms (wait %.0f)", i, ranks_[i].device_class.c_str(),
                  ranks_[i].step_seconds * 1e3, ranks_[i].wait_seconds * 1e3);
    s += buf;
  }
  if (tty_) {
    std::printf("\r\033[K%s", s.c_str());
    line_open_ = true;
  } else {
    std::printf("%s\n", s.c_str());
  }
  std::fflush(stdout);
}

void RunProgress::message(const std::string& text) {
  if (!enabled_) return;
  if (line_open_) std::printf("\r\033[K");
  line_open_ = false;
  std::printf("%s\n", text.c_str());
  std::fflush(stdout);
}

void RunProgress::finish() {
  if (line_open_) std::printf("\n");
  line_open_ = false;
  std::fflush(stdout);
}

nlohmann::json run_summary_json(const JobFile& job, const std::vector<RankOutcome>& ranks, int first_failure) {
  nlohmann::json out = {{"job", job.name}, {"world_size", ranks.size()}, {"succeeded", first_failure < 0}};
  if (first_failure >= 0) {
    out["failed_rank"] = first_failure;
    out["error"] = ranks[size_t(first_failure)].error;
  }
  nlohmann::json per_rank = nlohmann::json::array();
  for (const RankOutcome& r : ranks) {
    const nlohmann::json& s = r.summary;
    auto get = [&](const char* k) { return s.is_object() && s.contains(k) ? s[k] : nlohmann::json(); };
    per_rank.push_back({{"rank", r.rank},
                        {"device_class", r.device_class},
                        {"requested_device_class", r.requested_class},
                        {"note", r.note},
                        {"cpus", r.cpus},
                        {"exit_code", r.exit_code},
                        {"local_batch", get("local_batch")},
                        {"plan", get("plan")},
                        {"median_step_seconds", get("median_step_seconds")},
                        {"median_compute_seconds", get("median_compute_seconds")},
                        {"median_wait_seconds", get("median_wait_seconds")},
                        {"median_allreduce_seconds", get("median_allreduce_seconds")},
                        {"median_optimizer_seconds", get("median_optimizer_seconds")},
                        {"median_stats_seconds", get("median_stats_seconds")},
                        {"peak_memory_bytes", get("peak_memory_bytes")},
                        {"predicted", r.predicted}});
    if (r.rank == 0 && s.is_object()) {
      out["final_test_accuracy"] = get("final_test_accuracy");
      out["final_train_loss"] = get("final_train_loss");
      out["samples_per_second"] = get("samples_per_second");
      out["steps"] = get("steps");
      out["global_batch"] = get("global_batch");
    }
  }
  out["ranks"] = per_rank;
  return out;
}

std::string run_summary_table(const nlohmann::json& s) {
  std::string out;
  char buf[320];
  auto num = [](const nlohmann::json& v) { return v.is_number() ? v.get<double>() : 0.0; };
  std::snprintf(buf, sizeof buf, "job %s: %s; test accuracy %.2f%%, %.0f samples/s, %lld steps\n",
                s.value("job", std::string()).c_str(), s.value("succeeded", false) ? "succeeded" : "FAILED",
                num(s.value("final_test_accuracy", nlohmann::json())) * 100.0,
                num(s.value("samples_per_second", nlohmann::json())), (long long)num(s.value("steps", nlohmann::json())));
  out += buf;
  // compute: forward + backward as the worker times it (the prediction's optimizer share apart).
  out += "rank  device class  local batch  step ms (predicted)  compute ms (predicted)  wait ms (predicted)"
         "  optimizer ms (predicted)  allreduce ms  peak MiB (predicted)\n";
  for (const auto& r : s["ranks"]) {
    const nlohmann::json p = r.value("predicted", nlohmann::json::object());
    auto predicted = [&](const char* k) { return p.is_object() && p.contains(k) ? num(p[k]) : 0.0; };
    std::snprintf(buf, sizeof buf,
                  "%4d  %-12s  %11.0f  %7.1f (%7.1f)   %10.1f (%7.1f)    %7.1f (%7.1f)       %9.1f (%7.1f)  %12.1f  %8.1f (%8.1f)\n",
                  r["rank"].get<int>(), r["device_class"].get<std::string>().c_str(), num(r["local_batch"]),
                  num(r["median_step_seconds"]) * 1e3, predicted("step_seconds") * 1e3,
                  num(r["median_compute_seconds"]) * 1e3,
                  (predicted("compute_seconds") - predicted("optimizer_seconds")) * 1e3,
                  num(r["median_wait_seconds"]) * 1e3, predicted("wait_seconds") * 1e3,
                  num(r["median_optimizer_seconds"]) * 1e3, predicted("optimizer_seconds") * 1e3,
                  num(r["median_allreduce_seconds"]) * 1e3, num(r["peak_memory_bytes"]) / (1 << 20),
                  predicted("peak_memory_bytes") / (1 << 20));
    out += buf;
  }
  if (s.contains("plan") && s["plan"].is_object())
    out += "plan: " + s["plan"].value("strategy", std::string()) + " (indicator " +
           s["plan"].value("indicator", std::string()) + ", all-reduce " + s["plan"].value("all_reduce", std::string()) +
           ")\n";
  for (const auto& r : s["ranks"])
    if (r.value("plan", nlohmann::json()).is_string())
      out += "rank " + std::to_string(r["rank"].get<int>()) + " plan: " + r["plan"].get<std::string>() + "\n";
  if (s.contains("error")) out += "rank " + std::to_string(s["failed_rank"].get<int>()) + " failed first:\n" + s["error"].get<std::string>();
  return out;
}

}  // namespace qsync
