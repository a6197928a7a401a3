// File: operator/reconciler/node_placement.cpp
// Free GPUs and CPU of nodes, and the taints a job's pods do not tolerate (see node_placement.h).
#include "operator/reconciler/node_placement.h"

#include <algorithm>
#include <stdexcept>

#include "operator/controller/owner_refs.h"
#include "operator/lending/gpu_accounting.h"
#include "operator/reconciler/borrow_observation.h"
#include "operator/reconciler/pool_discovery.h"

namespace qsync::reconciler {
namespace {

using json = nlohmann::json;

std::string quantity_text(const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

// The cpu the pod's containers request (init containers ignored: they do not run alongside).
double pod_cpu_request(const json& pod) {
  double total = 0;
  for (const json& c : pod.value(json::json_pointer("/spec/containers"), json::array())) {
    const json requests = c.value(json::json_pointer("/resources/requests"), json::object());
    if (!requests.contains("cpu")) continue;
    try {
      total += cpu_quantity(quantity_text(requests["cpu"]), "a pod's cpu request");
    } catch (const std::invalid_argument&) {
      // the API server refuses such pods; count nothing
    }
  }
  return total;
}

}  // namespace

double cpu_quantity(const std::string& q, const std::string& what) {
  std::string number = q;
  double scale = 1;
  if (!number.empty() && number.back() == 'm') {
    number.pop_back();
    scale = 1e-3;
  }
  size_t used = 0;
  double v = -1;
  try {
    v = std::stod(number, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (number.empty() || used != number.size() || v < 0)
    throw std::invalid_argument(what + ": '" + q + "' is not a cpu quantity (use e.g. 2, 1.5 or 500m)");
  return v * scale;
}

bool tolerates(const json& toleration, const json& taint) {
  const std::string effect = toleration.value("effect", "");
  if (!effect.empty() && effect != taint.value("effect", "")) return false;
  const std::string key = toleration.value("key", "");
  const std::string op = toleration.value("operator", "Equal");
  if (op == "Exists") return key.empty() || key == taint.value("key", "");
  return key == taint.value("key", "") && toleration.value("value", "") == taint.value("value", "");
}

std::vector<json> untolerated_taints(const json& node, const json& tolerations) {
  std::vector<json> out;
  for (const json& taint : node.value(json::json_pointer("/spec/taints"), json::array())) {
    const std::string effect = taint.value("effect", "");
    if (effect != "NoSchedule" && effect != "NoExecute") continue;
    const bool ok = std::any_of(tolerations.begin(), tolerations.end(), [&](const json& t) { return tolerates(t, taint); });
    if (!ok) out.push_back(taint);
  }
  return out;
}

std::string taint_text(const json& taint) {
  const std::string value = taint.value("value", "");
  return taint.value("key", "") + (value.empty() ? "" : "=" + value) + ":" + taint.value("effect", "");
}

PlacementLimits placement_limits(const std::vector<json>& nodes, const std::vector<json>& pods, const std::string& job_uid,
                                 const api::HybridTrainingJob& job, const json& gpu_tolerations) {
  PlacementLimits limits;
  limits.free_gpus = lending::free_gpus(observe_nodes(nodes), observe_pods(pods, job_uid));
  for (const json& n : nodes) {
    const json alloc = n.value(json::json_pointer("/status/allocatable"), json::object());
    if (!alloc.contains("cpu")) continue;
    try {
      limits.free_cpus[n["metadata"].value("name", "")] = cpu_quantity(quantity_text(alloc["cpu"]), "allocatable cpu");
    } catch (const std::invalid_argument&) {
      // an odd quantity: leave the node's CPU uncounted
    }
  }
  for (const json& p : pods) {
    const std::string node = p.value(json::json_pointer("/spec/nodeName"), std::string());
    const std::string phase = p.value(json::json_pointer("/status/phase"), std::string());
    const std::optional<json> owner = controller::controller_reference_of(p);
    if (node.empty() || phase == "Succeeded" || phase == "Failed" || (owner && owner->value("uid", "") == job_uid)) continue;
    auto it = limits.free_cpus.find(node);
    if (it != limits.free_cpus.end()) it->second -= pod_cpu_request(p);
  }
  if (job.spec.resources && job.spec.resources->requests.count("cpu"))
    limits.cpu_per_rank = cpu_quantity(job.spec.resources->requests.at("cpu"), "spec.resources.requests.cpu");
  for (const std::vector<api::PoolEntry>* entries : {&job.spec.pool.training, &job.spec.pool.inference})
    for (const api::PoolEntry& e : *entries) {
      const PodTemplateSpec merged = merge_pod_templates(job.spec.pod_template, e.pod_template);
      limits.entry_tolerations[e.name] = merged.tolerations;
      if (!merged.node_selector.empty()) limits.entry_node_selectors[e.name] = merged.node_selector;
    }
  limits.gpu_tolerations = gpu_tolerations;
  return limits;
}

}  // namespace qsync::reconciler
