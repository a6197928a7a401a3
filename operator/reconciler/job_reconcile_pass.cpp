// File: operator/reconciler/job_reconcile_pass.cpp
// The readers of API objects the reconcile pass's files share (see job_reconcile_pass.h).
#include "operator/reconciler/job_reconcile_pass.h"

#include "operator/controller/owner_refs.h"

namespace qsync::reconciler {

namespace pass {

using json = nlohmann::json;

std::string label(const json& o, const char* key) {
  const json& labels = o["metadata"].value("labels", json::object());
  return labels.contains(key) && labels[key].is_string() ? labels[key].get<std::string>() : "";
}
std::string name_of(const json& o) { return o["metadata"].value("name", ""); }
bool terminating(const json& o) { return o["metadata"].contains("deletionTimestamp"); }
std::string pod_phase(const json& pod) {
  const std::string phase = pod.contains("status") ? pod["status"].value("phase", "") : "";
  return phase.empty() ? "Pending" : phase;
}
bool owned_by(const json& child, const std::string& uid) {
  const std::optional<json> ref = controller::controller_reference_of(child);
  return ref && ref->value("uid", "") == uid;
}
std::string pod_node(const json& pod) {
  const std::string bound = pod.value(json::json_pointer("/spec/nodeName"), std::string());
  if (!bound.empty()) return bound;
  return pod.value(json::json_pointer("/metadata/annotations/qsync.dev~1node"), std::string());
}
std::string earliest_pod_start(const std::vector<nlohmann::json>& pods) {
  std::string earliest;
  for (const nlohmann::json& pod : pods) {
    if (terminating(pod)) continue;  // a suspended or older attempt's pod: not this run's start
    const nlohmann::json start = pod.value(nlohmann::json::json_pointer("/status/startTime"), nlohmann::json());
    if (start.is_string() && !start.get<std::string>().empty() && (earliest.empty() || start.get<std::string>() < earliest))
      earliest = start.get<std::string>();
  }
  return earliest;
}

controller::ReconcileResult requeue_after(std::chrono::milliseconds delay) {
  controller::ReconcileResult r;
  r.requeue_after = delay;
  return r;
}

}  // namespace pass

}  // namespace qsync::reconciler
