// File: planner/worker_command.cpp
// The job's fields as `qsync-worker train` flags (worker_command.h).
#include "planner/worker_command.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

namespace qsync {

std::string number_text(double v) {
  if (!std::isfinite(v)) throw std::invalid_argument("number_text: " + std::to_string(v) + " is not a finite number");
  char buf[32];
  for (int digits = 1; digits <= 17; ++digits) {  // the shortest precision that round-trips
    std::snprintf(buf, sizeof buf, "%.*g", digits, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

std::vector<std::string> worker_train_command(const std::string& job_name, const JobSpec& s, const WorkerLaunch& l) {
  std::vector<std::string> a = {l.binary, "train", "--model", l.model};
  auto add = [&](const char* flag, const std::string& v) {
    a.push_back(flag);
    a.push_back(v);
  };
  if (!l.plan_file.empty()) add("--plan", l.plan_file);
  add("--batch", std::to_string(s.global_batch));
  if (s.steps) add("--steps", std::to_string(*s.steps));
  if (s.epochs) add("--epochs", number_text(*s.epochs));
  add("--seed", std::to_string(s.seed));
  add("--optimizer", s.optimizer.name);
  add("--lr", number_text(s.optimizer.lr));
  if (s.optimizer.weight_decay > 0) add("--weight-decay", number_text(s.optimizer.weight_decay));
  if (s.optimizer.warmup_steps > 0) add("--warmup", std::to_string(s.optimizer.warmup_steps));
  add("--lr-schedule", s.optimizer.schedule);
  if (s.optimizer.grad_clip > 0) add("--grad-clip", number_text(s.optimizer.grad_clip));
  if (s.eval_limit > 0) add("--eval-limit", std::to_string(s.eval_limit));
  if (s.eval_every > 0) add("--eval-every", std::to_string(s.eval_every));
  if (!l.data.empty()) add("--data", l.data);
  if (!l.device_class.empty()) add("--device-class", l.device_class);
  if (l.threads > 0) add("--threads", std::to_string(l.threads));
  if (l.memory_budget_bytes > 0) add("--memory-budget", std::to_string(std::max<int64_t>(1, l.memory_budget_bytes >> 20)));
  a.push_back("--log-json");
  if (l.log_every > 0) add("--log-every", std::to_string(l.log_every));
  add("--job-name", job_name);
  if (l.collective_timeout_seconds > 0) add("--collective-timeout", number_text(l.collective_timeout_seconds));
  if (l.metrics_port > 0) add("--metrics-port", std::to_string(l.metrics_port));
  if (!l.summary_json.empty()) add("--summary-json", l.summary_json);
  if (!l.checkpoint_dir.empty()) {
    add("--checkpoint-dir", l.checkpoint_dir);
    if (s.checkpoint.interval_steps > 0) add("--checkpoint-every", std::to_string(s.checkpoint.interval_steps));
    add("--keep-checkpoints", std::to_string(s.checkpoint.keep));
    if (l.resume) a.push_back("--resume");
  }
  if (!l.termination_log.empty()) add("--termination-log", l.termination_log);
  return a;
}

}  // namespace qsync
