// File: tests/kube_api_server/workload_controllers.cpp
// Deployment and StatefulSet controllers and the scale subresource (see workload_controllers.h).
#include "tests/kube_api_server/workload_controllers.h"

#include <algorithm>
#include <functional>
#include <map>

#include "tests/kube_api_server/api_error.h"
#include "tests/kube_api_server/deletion.h"
#include "tests/kube_api_server/json_patch.h"
#include "tests/kube_api_server/label_selector.h"
#include "tests/kube_api_server/object_writes.h"
#include "tests/kube_api_server/pod_scheduler.h"

namespace qsync::kube_test {
namespace {

using nlohmann::json;
using qsync::http::HttpRequest;
using qsync::http::HttpResponse;

const char* kPods = "/pods";
const char* kDeployments = "apps/deployments";
const char* kStatefulSets = "apps/statefulsets";

std::string phase_of(const json& pod) { return pod.contains("status") ? pod["status"].value("phase", "") : ""; }
bool terminating(const json& o) { return o["metadata"].contains("deletionTimestamp"); }
bool pod_ready(const json& pod) {
  if (terminating(pod)) return false;
  for (const json& c : pod.value(json::json_pointer("/status/conditions"), json::array()))
    if (c.value("type", "") == "Ready") return c.value("status", "") == "True";
  return false;
}
int64_t replicas_of(const json& workload) {
  const json& spec = workload.value("spec", json::object());
  return spec.contains("replicas") && spec["replicas"].is_number_integer() ? spec["replicas"].get<int64_t>() : 1;
}

bool controlled_by(const json& pod, const std::string& uid) {
  for (const json& ref : pod["metadata"].value("ownerReferences", json::array()))
    if (ref.value("controller", false) && ref.value("uid", "") == uid) return true;
  return false;
}

std::vector<json> owned_pods(ApiState& s, const json& owner) {
  std::vector<json> out;
  const std::string uid = owner["metadata"].value("uid", "");
  for (json& p : s.store.list(kPods, owner["metadata"].value("namespace", "")))
    if (controlled_by(p, uid)) out.push_back(std::move(p));
  return out;
}

json owner_reference(const json& owner) {
  return {{"apiVersion", owner.value("apiVersion", "apps/v1")}, {"kind", owner.value("kind", "")},
          {"name", owner["metadata"].value("name", "")},        {"uid", owner["metadata"].value("uid", "")},
          {"controller", true},                                  {"blockOwnerDeletion", true}};
}

std::string template_hash(const json& tmpl) {
  const size_t h = std::hash<std::string>{}(tmpl.dump());
  static const char* chars = "bcdfghjklmnpqrstvwxz2456789";
  std::string out;
  for (size_t v = h, i = 0; i < 10; ++i, v /= 27) out.push_back(chars[v % 27]);
  return out;
}

json pod_from_template(const json& owner, const json& labels_extra) {
  const json tmpl = owner.value(json::json_pointer("/spec/template"), json::object());
  json pod = {{"apiVersion", "v1"}, {"kind", "Pod"}, {"metadata", tmpl.value("metadata", json::object())},
              {"spec", tmpl.value("spec", json::object())}};
  pod["metadata"].erase("name");
  pod["metadata"]["namespace"] = owner["metadata"].value("namespace", "");
  if (!pod["metadata"].contains("labels")) pod["metadata"]["labels"] = json::object();
  for (const auto& [k, v] : labels_extra.items()) pod["metadata"]["labels"][k] = v;
  pod["metadata"]["ownerReferences"] = json::array({owner_reference(owner)});
  return pod;
}

bool write_status(ApiState& s, const ApiResource& r, const json& workload, json status) {
  if (workload.value("status", json::object()) == status) return false;
  json next = workload;
  next["status"] = std::move(status);
  update_object(s, r, "v1", workload["metadata"].value("namespace", ""), workload["metadata"].value("name", ""), next,
                WriteTarget::status);
  return true;
}

void delete_pod(ApiState& s, const json& pod) {
  const ApiResource* pods = s.registry.find_by_key(kPods);
  try {
    delete_object(s, *pods, pod["metadata"].value("namespace", ""), pod["metadata"].value("name", ""), "Background");
  } catch (const ApiError&) {
    // gone already
  }
}

// The order the ReplicaSet controller deletes surplus Pods in: the first is deleted first.
bool delete_before(const json& a, const json& b) {
  auto rank = [](const json& p) {
    if (p["spec"].value("nodeName", "").empty()) return 0;
    if (phase_of(p) == "Pending" || phase_of(p).empty()) return 1;
    if (!pod_ready(p)) return 2;
    return 3;
  };
  if (rank(a) != rank(b)) return rank(a) < rank(b);
  return a["metadata"].value("creationTimestamp", "") > b["metadata"].value("creationTimestamp", "");
}

bool reconcile_deployment(ApiState& s, const ApiResource& r, const json& d) {
  if (terminating(d)) return false;
  const ApiResource* pods_type = s.registry.find_by_key(kPods);
  bool wrote = false;
  std::vector<json> active;
  for (const json& p : owned_pods(s, d)) {
    if (terminating(p)) continue;
    if (phase_of(p) == "Failed" || phase_of(p) == "Succeeded") {
      delete_pod(s, p);
      wrote = true;
      continue;
    }
    active.push_back(p);
  }
  const int64_t want = replicas_of(d);
  const std::string hash = template_hash(d.value(json::json_pointer("/spec/template"), json::object()));
  for (int64_t k = int64_t(active.size()); k < want; ++k) {
    json pod = pod_from_template(d, {{"pod-template-hash", hash}});
    pod["metadata"]["generateName"] = d["metadata"].value("name", "") + "-" + hash + "-";
    active.push_back(create_object(s, *pods_type, "v1", d["metadata"].value("namespace", ""), pod));
    wrote = true;
  }
  if (int64_t(active.size()) > want) {
    std::sort(active.begin(), active.end(), delete_before);
    for (int64_t k = 0; k < int64_t(active.size()) - want; ++k) delete_pod(s, active[size_t(k)]);
    active.erase(active.begin(), active.begin() + (int64_t(active.size()) - want));
    wrote = true;
  }
  int64_t ready = 0;
  for (const json& p : owned_pods(s, d)) ready += pod_ready(p) ? 1 : 0;
  int64_t existing = 0;
  for (const json& p : owned_pods(s, d)) existing += terminating(p) ? 0 : 1;
  const json prior = d.value("status", json::object());
  json status = {{"observedGeneration", d["metadata"].value("generation", int64_t(1))},
                 {"replicas", existing},
                 {"updatedReplicas", existing},
                 {"readyReplicas", ready},
                 {"availableReplicas", ready},
                 {"unavailableReplicas", std::max<int64_t>(0, want - ready)}};
  const bool available = ready >= want;
  json condition = {{"type", "Available"},
                    {"status", available ? "True" : "False"},
                    {"reason", available ? "MinimumReplicasAvailable" : "MinimumReplicasUnavailable"},
                    {"message", available ? "Deployment has minimum availability." : "Deployment does not have minimum availability."}};
  const json old_conditions = prior.value("conditions", json::array());
  const bool same = !old_conditions.empty() && old_conditions[0].value("status", "") == condition["status"];
  condition["lastTransitionTime"] = same ? old_conditions[0].value("lastTransitionTime", rfc3339_now()) : rfc3339_now();
  condition["lastUpdateTime"] = condition["lastTransitionTime"];
  status["conditions"] = json::array({condition});
  return write_status(s, r, d, status) || wrote;
}

bool reconcile_stateful_set(ApiState& s, const ApiResource& r, const json& set) {
  if (terminating(set)) return false;
  const ApiResource* pods_type = s.registry.find_by_key(kPods);
  const std::string ns = set["metadata"].value("namespace", ""), name = set["metadata"].value("name", "");
  const bool ordered = set.value(json::json_pointer("/spec/podManagementPolicy"), std::string("OrderedReady")) != "Parallel";
  const int64_t want = replicas_of(set);
  std::map<int64_t, json> by_ordinal;
  for (json& p : owned_pods(s, set)) {
    const std::string pod_name = p["metadata"].value("name", "");
    if (pod_name.rfind(name + "-", 0) != 0) continue;
    try {
      by_ordinal[std::stoll(pod_name.substr(name.size() + 1))] = std::move(p);
    } catch (const std::exception&) {
    }
  }
  bool wrote = false;
  for (auto& [ordinal, p] : by_ordinal) {
    if (!terminating(p) && (phase_of(p) == "Failed" || phase_of(p) == "Succeeded")) {
      delete_pod(s, p);  // recreated once it is gone
      wrote = true;
    }
  }
  for (int64_t i = 0; i < want; ++i) {
    auto it = by_ordinal.find(i);
    if (it != by_ordinal.end()) {
      if (ordered && !pod_ready(it->second)) break;  // the next waits for this one
      continue;
    }
    const std::string pod_name = name + "-" + std::to_string(i);
    if (s.store.get(kPods, ns, pod_name) != nullptr) break;  // an old one still terminating
    json pod = pod_from_template(set, {{"statefulset.kubernetes.io/pod-name", pod_name}});
    pod["metadata"]["name"] = pod_name;
    pod["spec"]["hostname"] = pod_name;
    if (set["spec"].contains("serviceName")) pod["spec"]["subdomain"] = set["spec"]["serviceName"];
    by_ordinal[i] = create_object(s, *pods_type, "v1", ns, pod);
    wrote = true;
    if (ordered) break;
  }
  for (auto it = by_ordinal.rbegin(); it != by_ordinal.rend(); ++it) {
    if (it->first < want) break;
    if (terminating(it->second)) {
      if (ordered) break;  // one at a time
      continue;
    }
    delete_pod(s, it->second);
    wrote = true;
    if (ordered) break;
  }
  int64_t existing = 0, ready = 0;
  for (const json& p : owned_pods(s, set)) {
    existing += terminating(p) ? 0 : 1;
    ready += pod_ready(p) ? 1 : 0;
  }
  const json status = {{"observedGeneration", set["metadata"].value("generation", int64_t(1))},
                       {"replicas", existing},
                       {"currentReplicas", existing},
                       {"updatedReplicas", existing},
                       {"readyReplicas", ready},
                       {"availableReplicas", ready}};
  return write_status(s, r, set, status) || wrote;
}

json scale_of(const json& workload) {
  const json& meta = workload["metadata"];
  return {{"apiVersion", "autoscaling/v1"},
          {"kind", "Scale"},
          {"metadata",
           {{"name", meta.value("name", "")},
            {"namespace", meta.value("namespace", "")},
            {"uid", meta.value("uid", "")},
            {"resourceVersion", meta.value("resourceVersion", "")},
            {"creationTimestamp", meta.value("creationTimestamp", "")}}},
          {"spec", {{"replicas", replicas_of(workload)}}},
          {"status",
           {{"replicas", workload.value(json::json_pointer("/status/replicas"), int64_t(0))},
            {"selector", selector_text(workload.value(json::json_pointer("/spec/selector"), json::object()))}}}};
}

}  // namespace

std::string selector_text(const json& selector) {
  std::string out;
  auto add = [&](const std::string& term) { out += (out.empty() ? "" : ",") + term; };
  const json labels = selector.value("matchLabels", json::object());
  for (const auto& [k, v] : labels.items())
    if (v.is_string()) add(k + "=" + v.get<std::string>());
  for (const json& e : selector.value("matchExpressions", json::array())) {
    const std::string key = e.value("key", ""), op = e.value("operator", "");
    std::string values;
    for (const json& v : e.value("values", json::array())) values += (values.empty() ? "" : ",") + v.get<std::string>();
    if (op == "In") add(key + " in (" + values + ")");
    if (op == "NotIn") add(key + " notin (" + values + ")");
    if (op == "Exists") add(key);
    if (op == "DoesNotExist") add("!" + key);
  }
  return out;
}

void run_controllers(ApiState& s) {
  if (!s.options.controllers || s.controllers_running) return;
  s.controllers_running = true;
  try {
    for (int round = 0; round < 8; ++round) {
      bool wrote = false;
      for (const char* key : {kDeployments, kStatefulSets}) {
        const ApiResource* r = s.registry.find_by_key(key);
        if (r == nullptr) continue;
        const ApiResource type = *r;
        for (const json& w : s.store.list(key, ""))
          wrote = (key == kDeployments ? reconcile_deployment(s, type, w) : reconcile_stateful_set(s, type, w)) || wrote;
      }
      wrote = schedule_pending_pods(s) || wrote;
      if (!wrote) break;
    }
  } catch (...) {
    s.controllers_running = false;
    throw;
  }
  s.controllers_running = false;
  s.changed.notify_all();
}

HttpResponse handle_scale(ApiState& s, const ApiResource& r, const ResourcePath& p, const HttpRequest& req) {
  const json* found = s.store.get(r.key(), p.ns, p.name);
  if (found == nullptr) throw not_found_error(resource_label(r), p.name);
  const json live = *found;
  json scale = scale_of(live);
  if (req.method == "PUT" || req.method == "PATCH") {
    json body;
    try {
      body = json::parse(req.body);
    } catch (const json::parse_error&) {
      throw bad_request_error("the Scale body is not JSON");
    }
    json next_scale;
    const std::string type = req.header("content-type").substr(0, req.header("content-type").find(';'));
    if (req.method == "PUT") {
      next_scale = body;
      const std::string rv = body.value(json::json_pointer("/metadata/resourceVersion"), std::string());
      if (!rv.empty() && rv != live["metadata"].value("resourceVersion", "")) throw conflict_error(resource_label(r), p.name);
    } else if (type == "application/json-patch+json") {
      try {
        next_scale = json_patch_apply(scale, body);
      } catch (const std::invalid_argument& e) {
        throw ApiError(422, "Invalid", std::string("the JSON patch could not be applied: ") + e.what());
      }
    } else {
      next_scale = merge_patch(scale, body);
    }
    const json replicas = next_scale.value(json::json_pointer("/spec/replicas"), json());
    if (!replicas.is_number_integer() || replicas.get<int64_t>() < 0)
      throw invalid_error("Scale", p.name, {"spec.replicas: Invalid value: must be an integer >= 0"});
    json next = live;
    next["spec"]["replicas"] = replicas.get<int64_t>();
    const json stored = update_object(s, r, p.version, p.ns, p.name, next, WriteTarget::main);
    scale = scale_of(stored);
  } else if (req.method != "GET") {
    throw ApiError(405, "MethodNotAllowed", req.method + " is not supported on " + req.path);
  }
  HttpResponse res;
  res.headers["Content-Type"] = "application/json";
  res.body = scale.dump();
  return res;
}

}  // namespace qsync::kube_test
