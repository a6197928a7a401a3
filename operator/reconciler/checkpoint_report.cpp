// File: operator/reconciler/checkpoint_report.cpp
// Reading checkpoint steps out of worker termination messages (see checkpoint_report.h).
#include "operator/reconciler/checkpoint_report.h"

#include <algorithm>

#include "operator/controller/owner_refs.h"

namespace qsync::reconciler {

using json = nlohmann::json;

int64_t checkpoint_step_of_message(const std::string& message) {
  const json report = json::parse(message, nullptr, /*allow_exceptions=*/false);
  if (!report.is_object() || !report.contains("checkpointStep")) return -1;
  const json& step = report["checkpointStep"];
  if (!step.is_number_integer()) return -1;
  const int64_t value = step.get<int64_t>();
  return value >= 0 ? value : -1;
}

int64_t reported_checkpoint_step(const json& pod) {
  int64_t highest = 0;
  const json statuses = pod.value(json::json_pointer("/status/containerStatuses"), json::array());
  if (!statuses.is_array()) return 0;
  for (const json& container : statuses) {
    if (!container.is_object()) continue;
    for (const char* which : {"state", "lastState"}) {
      const json terminated = container.value(json::json_pointer(std::string("/") + which + "/terminated"), json());
      if (!terminated.is_object() || !terminated.contains("message") || !terminated["message"].is_string()) continue;
      highest = std::max(highest, checkpoint_step_of_message(terminated["message"].get<std::string>()));
    }
  }
  return highest;
}

void ReportedCheckpoints::observe(const json& pod) {
  const int64_t step = reported_checkpoint_step(pod);
  if (step <= 0) return;
  const std::optional<json> owner = controller::controller_reference_of(pod);
  if (!owner) return;
  const std::string uid = owner->value("uid", "");
  if (uid.empty()) return;
  std::lock_guard lock(mu_);
  int64_t& known = steps_[uid];
  known = std::max(known, step);
}

int64_t ReportedCheckpoints::step_for(const std::string& job_uid) const {
  std::lock_guard lock(mu_);
  auto it = steps_.find(job_uid);
  return it == steps_.end() ? 0 : it->second;
}

void ReportedCheckpoints::forget(const std::string& job_uid) {
  std::lock_guard lock(mu_);
  steps_.erase(job_uid);
}

}  // namespace qsync::reconciler
