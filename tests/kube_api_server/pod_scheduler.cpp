// File: tests/kube_api_server/pod_scheduler.cpp
// GPU-aware binding of pending Pods (see pod_scheduler.h).
#include "tests/kube_api_server/pod_scheduler.h"

#include <algorithm>
#include <map>

#include "tests/kube_api_server/object_writes.h"

namespace qsync::kube_test {
namespace {

using nlohmann::json;

const char* kPods = "/pods";
const char* kNodes = "/nodes";
const char* kGpu = "nvidia.com/gpu";

int64_t quantity_count(const json& q) {
  if (q.is_number_integer()) return q.get<int64_t>();
  if (q.is_number()) return int64_t(q.get<double>());
  if (!q.is_string()) return 0;
  try {
    return std::stoll(q.get<std::string>());
  } catch (const std::exception&) {
    return 0;
  }
}

bool finished(const json& pod) {
  const std::string phase = pod.contains("status") ? pod["status"].value("phase", "") : "";
  return phase == "Succeeded" || phase == "Failed";
}

bool node_schedulable(const json& node) {
  if (node.contains("spec") && node["spec"].value("unschedulable", false)) return false;
  for (const json& c : node.value(json::json_pointer("/status/conditions"), json::array()))
    if (c.value("type", "") == "Ready") return c.value("status", "") == "True";
  return true;
}

std::string node_label(const json& node, const std::string& key) {
  const json labels = node["metadata"].value("labels", json::object());
  if (labels.contains(key) && labels[key].is_string()) return labels[key].get<std::string>();
  if (key == "kubernetes.io/hostname") return node["metadata"].value("name", "");
  return "";
}

bool has_label(const json& node, const std::string& key) {
  return node["metadata"].value("labels", json::object()).contains(key) || key == "kubernetes.io/hostname";
}

// nodeSelector and requiredDuringSchedulingIgnoredDuringExecution terms (any term may match).
bool node_matches(const json& pod, const json& node) {
  const json& spec = pod["spec"];
  const json selector = spec.value("nodeSelector", json::object());
  for (const auto& [key, value] : selector.items())
    if (!value.is_string() || node_label(node, key) != value.get<std::string>() || !has_label(node, key)) return false;
  const json terms = spec.value(
      json::json_pointer("/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms"),
      json::array());
  if (terms.empty()) return true;
  for (const json& term : terms) {
    bool all = true;
    for (const json& e : term.value("matchExpressions", json::array())) {
      const std::string key = e.value("key", ""), op = e.value("operator", "");
      const json values = e.value("values", json::array());
      const bool present = has_label(node, key);
      const std::string v = node_label(node, key);
      const bool listed = std::any_of(values.begin(), values.end(), [&](const json& x) { return x.is_string() && x == v; });
      const bool ok = op == "In" ? present && listed
                      : op == "NotIn" ? !present || !listed
                      : op == "Exists" ? present
                      : op == "DoesNotExist" ? !present
                                             : false;
      all = all && ok;
    }
    if (all) return true;
  }
  return false;
}

// kube-scheduler's TaintToleration filter: a toleration with an empty effect matches every
// effect, operator Exists with an empty key matches every taint, Equal (the default) needs key
// and value equal.
bool tolerates(const json& toleration, const json& taint) {
  const std::string effect = toleration.value("effect", "");
  if (!effect.empty() && effect != taint.value("effect", "")) return false;
  const std::string key = toleration.value("key", "");
  if (toleration.value("operator", "Equal") == "Exists") return key.empty() || key == taint.value("key", "");
  return key == taint.value("key", "") && toleration.value("value", "") == taint.value("value", "");
}

// The first NoSchedule/NoExecute taint of the node the pod does not tolerate (null: none).
json untolerated_taint(const json& pod, const json& node) {
  const json tolerations = pod["spec"].value("tolerations", json::array());
  for (const json& taint : node.value(json::json_pointer("/spec/taints"), json::array())) {
    const std::string effect = taint.value("effect", "");
    if (effect != "NoSchedule" && effect != "NoExecute") continue;  // PreferNoSchedule only scores
    if (std::none_of(tolerations.begin(), tolerations.end(), [&](const json& t) { return tolerates(t, taint); })) return taint;
  }
  return nullptr;
}

}  // namespace

int64_t pod_gpu_request(const json& pod) {
  int64_t limits = 0, requests = 0;
  for (const json& c : pod.value(json::json_pointer("/spec/containers"), json::array())) {
    const json resources = c.value("resources", json::object());
    if (resources.contains("limits") && resources["limits"].contains(kGpu)) limits += quantity_count(resources["limits"][kGpu]);
    if (resources.contains("requests") && resources["requests"].contains(kGpu))
      requests += quantity_count(resources["requests"][kGpu]);
  }
  return std::max(limits, requests);
}

bool pod_needs_scheduling(const ApiState& s, const json& pod) {
  if (!s.options.controllers || !pod.contains("spec")) return false;
  return pod_gpu_request(pod) > 0 && pod["spec"].value("nodeName", "").empty() && !pod["metadata"].contains("deletionTimestamp");
}

bool schedule_pending_pods(ApiState& s) {
  if (!s.options.controllers) return false;
  std::vector<json> nodes = s.store.list(kNodes, "");
  std::vector<json> pending;
  std::map<std::string, int64_t> free;
  for (const json& n : nodes) {
    const json alloc = n.value(json::json_pointer("/status/allocatable"), json::object());
    free[n["metadata"].value("name", "")] = alloc.contains(kGpu) ? quantity_count(alloc[kGpu]) : 0;
  }
  for (const json& p : s.store.list(kPods, "")) {
    const std::string node = p["spec"].value("nodeName", "");
    if (!node.empty()) {
      if (!finished(p) && free.count(node)) free[node] -= pod_gpu_request(p);
    } else if (pod_needs_scheduling(s, p)) {
      pending.push_back(p);
    }
  }
  std::sort(pending.begin(), pending.end(), [](const json& a, const json& b) {
    const std::string ta = a["metadata"].value("creationTimestamp", ""), tb = b["metadata"].value("creationTimestamp", "");
    return ta != tb ? ta < tb : a["metadata"].value("name", "") < b["metadata"].value("name", "");
  });
  bool wrote = false;
  for (json pod : pending) {
    const int64_t want = pod_gpu_request(pod);
    std::string best;
    int64_t insufficient = 0, mismatched = 0, unschedulable = 0;
    std::map<std::string, int64_t> tainted;  // "{key: value}" -> nodes
    for (const json& n : nodes) {
      const std::string name = n["metadata"].value("name", "");
      if (!node_schedulable(n)) {
        ++unschedulable;
      } else if (!node_matches(pod, n)) {
        ++mismatched;
      } else if (const json taint = untolerated_taint(pod, n); !taint.is_null()) {
        ++tainted["{" + taint.value("key", "") + ": " + taint.value("value", "") + "}"];
      } else if (free[name] < want) {
        ++insufficient;
      } else if (best.empty() || free[name] > free[best]) {
        best = name;
      }
    }
    const std::string ns = pod["metadata"].value("namespace", ""), name = pod["metadata"].value("name", "");
    if (!best.empty()) {
      free[best] -= want;
      json bound = pod;
      bound["spec"]["nodeName"] = best;
      json& st = bound["status"];
      if (!st.is_object()) st = json::object();
      st["phase"] = st.value("phase", "Pending");
      st["conditions"] = json::array({{{"type", "PodScheduled"}, {"status", "True"}, {"lastTransitionTime", rfc3339_now()}}});
      const json stored = s.store.put(kPods, bound);
      if (s.pod_added) s.pod_added(stored);
      wrote = true;
      continue;
    }
    std::string message = "0/" + std::to_string(nodes.size()) + " nodes are available:";
    std::vector<std::string> parts;
    if (insufficient) parts.push_back(std::to_string(insufficient) + " Insufficient nvidia.com/gpu");
    if (mismatched) parts.push_back(std::to_string(mismatched) + " node(s) didn't match Pod's node affinity/selector");
    for (const auto& [taint, count] : tainted) parts.push_back(std::to_string(count) + " node(s) had untolerated taint " + taint);
    if (unschedulable) parts.push_back(std::to_string(unschedulable) + " node(s) were unschedulable or not ready");
    for (size_t i = 0; i < parts.size(); ++i) message += (i ? ", " : " ") + parts[i];
    message += ".";
    const json condition = {{"type", "PodScheduled"}, {"status", "False"}, {"reason", "Unschedulable"}, {"message", message}};
    const json existing = pod.value(json::json_pointer("/status/conditions"), json::array());
    if (existing.size() == 1 && existing[0].value("reason", "") == "Unschedulable" && existing[0].value("message", "") == message)
      continue;
    json marked = pod;
    marked["status"] = {{"phase", "Pending"}, {"conditions", json::array({condition})}};
    marked["status"]["conditions"][0]["lastTransitionTime"] = rfc3339_now();
    s.store.put(kPods, marked);
    wrote = true;
  }
  return wrote;
}

}  // namespace qsync::kube_test
