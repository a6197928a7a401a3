// File: operator/reconciler/borrow_observation.cpp
// API objects as the lending decision's observations (see borrow_observation.h).
#include "operator/reconciler/borrow_observation.h"

#include <algorithm>

#include "operator/controller/owner_refs.h"
#include "operator/reconciler/pool_discovery.h"

namespace qsync::reconciler {
namespace {

using json = nlohmann::json;

const char* GPU = "nvidia.com/gpu";

int64_t count_of(const json& q) {
  if (q.is_number_integer()) return q.get<int64_t>();
  if (q.is_number()) return int64_t(q.get<double>());
  if (!q.is_string()) return 0;
  try {
    return std::stoll(q.get<std::string>());
  } catch (const std::exception&) {
    return 0;
  }
}

int64_t int_annotation(const json& o, const char* key) {
  try {
    const std::string v = annotation_of(o, key);
    return v.empty() ? 0 : std::stoll(v);
  } catch (const std::exception&) {
    return 0;
  }
}

int64_t containers_gpus(const json& spec) {
  int64_t limits = 0, requests = 0;
  for (const json& c : spec.value("containers", json::array())) {
    const json r = c.value("resources", json::object());
    if (r.contains("limits") && r["limits"].contains(GPU)) limits += count_of(r["limits"][GPU]);
    if (r.contains("requests") && r["requests"].contains(GPU)) requests += count_of(r["requests"][GPU]);
  }
  return std::max(limits, requests);
}

std::string phase_of(const json& pod) { return pod.contains("status") ? pod["status"].value("phase", "") : ""; }

bool ready(const json& pod) {
  if (pod["metadata"].contains("deletionTimestamp")) return false;
  for (const json& c : pod.value(json::json_pointer("/status/conditions"), json::array()))
    if (c.value("type", "") == "Ready") return c.value("status", "") == "True";
  return false;
}

}  // namespace

std::string annotation_of(const json& object, const std::string& key) {
  const json a = object.value(json::json_pointer("/metadata/annotations"), json::object());
  return a.contains(key) && a[key].is_string() ? a[key].get<std::string>() : "";
}

bool workload_selects(const json& workload, const json& pod) {
  if (pod["metadata"].value("namespace", "") != workload["metadata"].value("namespace", "")) return false;
  const json selector = workload.value(json::json_pointer("/spec/selector"), json::object());
  const json labels = pod["metadata"].value("labels", json::object());
  const json match = selector.value("matchLabels", json::object());
  const json expressions = selector.value("matchExpressions", json::array());
  if (match.empty() && expressions.empty()) return false;  // an empty selector selects nothing here
  for (const auto& [k, v] : match.items())
    if (!labels.contains(k) || labels[k] != v) return false;
  for (const json& e : expressions) {
    const std::string key = e.value("key", ""), op = e.value("operator", "");
    const json values = e.value("values", json::array());
    const bool has = labels.contains(key);
    const bool in = has && std::find(values.begin(), values.end(), labels[key]) != values.end();
    if ((op == "In" && !in) || (op == "NotIn" && in) || (op == "Exists" && !has) || (op == "DoesNotExist" && has)) return false;
  }
  return true;
}

int64_t workload_gpus_per_replica(const json& workload) {
  return containers_gpus(workload.value(json::json_pointer("/spec/template/spec"), json::object()));
}

bool pod_unschedulable(const json& pod) {
  if (phase_of(pod) != "Pending" && !phase_of(pod).empty()) return false;
  for (const json& c : pod.value(json::json_pointer("/status/conditions"), json::array()))
    if (c.value("type", "") == "PodScheduled" && c.value("status", "") == "False" && c.value("reason", "") == "Unschedulable")
      return true;
  return false;
}

lending::WorkloadObservation observe_workload(const json& workload, const std::vector<json>& pods, const std::string& job) {
  lending::WorkloadObservation w;
  if (!workload.is_object()) return w;
  w.exists = true;
  const std::string lent_to = annotation_of(workload, LENT_TO_ANNOTATION);
  w.opted_in = annotation_of(workload, LENDABLE_ANNOTATION) == "true" && (lent_to.empty() || lent_to == job);
  const json spec = workload.value("spec", json::object());
  w.replicas = spec.contains("replicas") && spec["replicas"].is_number_integer() ? spec["replicas"].get<int64_t>() : 1;
  w.serving_replicas = lent_to == job || lent_to.empty() ? int_annotation(workload, SERVING_REPLICAS_ANNOTATION) : 0;
  w.replicas_set = lent_to == job ? int_annotation(workload, LENDING_REPLICAS_ANNOTATION) : 0;
  for (const json& p : pods) {
    if (!workload_selects(workload, p)) continue;
    const std::string phase = phase_of(p);
    if (phase == "Succeeded" || phase == "Failed") continue;
    ++w.pods;
    if (ready(p)) ++w.ready_replicas;
    if (pod_unschedulable(p)) ++w.unschedulable_pods;
  }
  return w;
}

std::vector<lending::NodeObservation> observe_nodes(const std::vector<json>& nodes) {
  std::vector<lending::NodeObservation> out;
  for (const json& n : nodes) {
    lending::NodeObservation o;
    o.name = n["metadata"].value("name", "");
    o.schedulable = node_is_schedulable(n);
    const json alloc = n.value(json::json_pointer("/status/allocatable"), json::object());
    o.advertises_gpus = alloc.contains(GPU);
    o.allocatable_gpus = o.advertises_gpus ? count_of(alloc[GPU]) : 0;
    out.push_back(std::move(o));
  }
  return out;
}

std::vector<lending::PodObservation> observe_pods(const std::vector<json>& pods, const std::string& job_uid) {
  std::vector<lending::PodObservation> out;
  for (const json& p : pods) {
    lending::PodObservation o;
    o.node = p.value(json::json_pointer("/spec/nodeName"), std::string());
    o.gpus = containers_gpus(p.value("spec", json::object()));
    const std::string phase = phase_of(p);
    o.finished = phase == "Succeeded" || phase == "Failed";
    const std::optional<json> owner = controller::controller_reference_of(p);
    o.job_pod = !job_uid.empty() && owner && owner->value("uid", "") == job_uid;
    if (o.gpus > 0) out.push_back(std::move(o));
  }
  return out;
}

}  // namespace qsync::reconciler
