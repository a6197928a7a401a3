// File: operator/reconciler/kueue_workload.cpp
// A queued job's Kueue Workload and the job's admission and eviction (see kueue_workload.h).
#include "operator/reconciler/kueue_workload.h"

#include <cstdio>
#include <regex>
#include <stdexcept>

#include "operator/controller/owner_refs.h"
#include "operator/reconciler/desired_children.h"
#include "operator/reconciler/worker_pod_settings.h"

namespace qsync::reconciler {

using json = nlohmann::json;

namespace {

const json* find_condition(const json& object, const std::string& type) {
  if (!object.contains("status") || !object["status"].contains("conditions")) return nullptr;
  for (const json& c : object["status"]["conditions"])
    if (c.value("type", "") == type) return &c;
  return nullptr;
}
bool condition_true(const json& object, const std::string& type) {
  const json* c = find_condition(object, type);
  return c != nullptr && c->value("status", "") == "True";
}

// The pool entries' JSON arrays of a job object, training first.
std::vector<json*> entry_objects(json& job_object) {
  std::vector<json*> out;
  json& pool = job_object["spec"]["pool"];
  for (const char* kind : {"training", "inference"})
    if (pool.contains(kind))
      for (json& e : pool[kind]) out.push_back(&e);
  return out;
}

// A toleration list with `extra`'s items added where not already present.
void add_tolerations(json& into, const json& extra) {
  for (const json& t : extra) {
    bool present = false;
    for (const json& have : into) present = present || have == t;
    if (!present) into.push_back(t);
  }
}

json pod_set(const api::PoolEntry& e, const api::PodSetStatus& set, const api::HybridTrainingJob& job,
             const json& gpu_tolerations) {
  json selector = json::object();
  for (const auto& [k, v] : e.node_selector) selector[k] = v;
  for (const auto& [k, v] : job.spec.pod_template.node_selector) selector[k] = v;
  for (const auto& [k, v] : e.pod_template.node_selector) selector[k] = v;
  json tolerations = json::array();
  if (set.requests.count(GPU_RESOURCE)) add_tolerations(tolerations, gpu_tolerations);
  add_tolerations(tolerations, job.spec.pod_template.tolerations);
  add_tolerations(tolerations, e.pod_template.tolerations);
  json requests = json::object();
  for (const auto& [k, v] : set.requests) requests[k] = v;
  json spec = {{"containers", json::array({{{"name", "worker"}, {"resources", {{"requests", requests}}}}})},
               {"nodeSelector", selector},
               {"tolerations", tolerations}};
  const std::string priority = !e.pod_template.priority_class_name.empty() ? e.pod_template.priority_class_name
                                                                           : job.spec.pod_template.priority_class_name;
  if (!priority.empty()) spec["priorityClassName"] = priority;
  return {{"name", e.name}, {"count", set.count}, {"template", {{"spec", spec}}}};
}

}  // namespace

const kube::ResourceType& kueue_workloads_type() {
  static const kube::ResourceType t{"kueue.x-k8s.io", "v1beta2", "workloads", "Workload", true};
  return t;
}
const kube::ResourceType& kueue_resource_flavors_type() {
  static const kube::ResourceType t{"kueue.x-k8s.io", "v1beta2", "resourceflavors", "ResourceFlavor", false};
  return t;
}

std::string kueue_workload_name(const std::string& job, const std::string& uid) {
  uint32_t h = 2166136261u;  // FNV-1a over Kueue's hash input: kind, group, name, uid
  for (const char c : "HybridTrainingJob\nqsync.dev\n" + job + "\n" + uid) h = (h ^ uint8_t(c)) * 16777619u;
  char hex[9];
  std::snprintf(hex, sizeof hex, "%08x", h);
  return "hybridtrainingjob-" + job.substr(0, 236) + "-" + std::string(hex, 5);
}

json desired_kueue_workload(const json& job_object, const api::HybridTrainingJob& job, const json& gpu_tolerations) {
  static const std::regex dns_label("[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?");
  const std::vector<api::PodSetStatus> sets = kueue_pod_sets(job);
  if (sets.size() > KUEUE_MAX_POD_SETS)
    throw std::invalid_argument("the pool has " + std::to_string(sets.size()) + " entries; a Kueue Workload holds at most " +
                                std::to_string(KUEUE_MAX_POD_SETS) + " pod sets: merge entries, or remove the " +
                                "kueue.x-k8s.io/queue-name label");
  json pod_sets = json::array();
  size_t i = 0;
  for (const std::vector<api::PoolEntry>* entries : {&job.spec.pool.training, &job.spec.pool.inference})
    for (const api::PoolEntry& e : *entries) {
      if (!std::regex_match(e.name, dns_label))
        throw std::invalid_argument("pool entry \"" + e.name + "\" is a Kueue pod set name, which must be a lowercase DNS "
                                    "label (a-z, 0-9, '-', at most 63): rename the entry");
      pod_sets.push_back(pod_set(e, sets[i++], job, gpu_tolerations));
    }
  const std::string queue = job.metadata["labels"].value(KUEUE_QUEUE_LABEL, "");
  json wl = {{"apiVersion", kueue_workloads_type().api_version()},
             {"kind", "Workload"},
             {"metadata",
              {{"name", kueue_workload_name(job.name(), job.metadata.value("uid", ""))},
               {"namespace", job.namespace_name()},
               {"labels", {{JOB_LABEL, job.name()}, {KUEUE_JOB_UID_LABEL, job.metadata.value("uid", "")}}}}},
             {"spec", {{"queueName", queue}, {"podSets", pod_sets}}}};
  controller::set_controller_reference(wl, job_object);
  return wl;
}

bool kueue_workload_equivalent(const json& live, const json& desired) {
  const json spec = live.value("spec", json::object());
  if (spec.value("queueName", "") != desired["spec"]["queueName"]) return false;
  const json sets = spec.value("podSets", json::array());
  const json& want = desired["spec"]["podSets"];
  if (sets.size() != want.size()) return false;
  for (size_t i = 0; i < sets.size(); ++i) {
    if (sets[i].value("name", "") != want[i]["name"] || sets[i].value("count", int64_t(-1)) != want[i]["count"]) return false;
    const json::json_pointer containers("/template/spec/containers");
    if (!sets[i].contains(containers) || sets[i][containers] != want[i][containers]) return false;
  }
  return true;
}

KueueState kueue_state(const json& workload) {
  KueueState s;
  s.quota_reserved = condition_true(workload, "QuotaReserved");
  s.evicted = condition_true(workload, "Evicted");
  s.finished = condition_true(workload, "Finished");
  if (const json* c = find_condition(workload, "Evicted"); c != nullptr && s.evicted) {
    s.evicted_reason = c->value("reason", "");
    s.evicted_message = c->value("message", "");
  }
  const json status = workload.value("status", json::object());
  s.has_admission = status.contains("admission") && status["admission"].is_object();
  if (s.has_admission) {
    const json& admission = status["admission"];
    s.cluster_queue = admission.value("clusterQueue", "");
    const json assignments = admission.value("podSetAssignments", json::array());
    for (const json& a : assignments) {
      std::set<std::string>& flavors = s.flavors[a.value("name", "")];
      const json by_resource = a.value("flavors", json::object());
      for (const auto& [resource, flavor] : by_resource.items())
        if (flavor.is_string()) flavors.insert(flavor.get<std::string>());
    }
  }
  s.admitted = condition_true(workload, "Admitted") && s.has_admission && !s.evicted && !s.finished;
  return s;
}

std::optional<std::string> add_flavor(PodSetInfo& info, const json& flavor) {
  const json spec = flavor.value("spec", json::object());
  const std::string name = flavor["metadata"].value("name", "");
  const json labels = spec.value("nodeLabels", json::object());
  for (const auto& [k, v] : labels.items()) {
    const std::string value = v.is_string() ? v.get<std::string>() : v.dump();
    auto it = info.node_selector.find(k);
    if (it != info.node_selector.end() && it->second != value)
      return "ResourceFlavor " + name + " labels nodes " + k + "=" + value + " but another flavor of the pod set has " + k +
             "=" + it->second;
    info.node_selector[k] = value;
  }
  add_tolerations(info.tolerations, spec.value("tolerations", json::array()));
  return std::nullopt;
}

std::optional<std::string> admitted_job(json& job_object, const std::map<std::string, PodSetInfo>& infos) {
  json updated = job_object;
  json& annotations = updated["metadata"]["annotations"];
  const bool kept = annotations.is_object() && annotations.contains(KUEUE_ORIGINAL_TEMPLATES_ANNOTATION);
  json originals = kept ? json::parse(annotations[KUEUE_ORIGINAL_TEMPLATES_ANNOTATION].get<std::string>(), nullptr, false)
                        : json::object();
  if (originals.is_discarded() || !originals.is_object()) originals = json::object();
  for (json* e : entry_objects(updated)) {
    const std::string name = e->value("name", "");
    json& t = (*e)["podTemplate"];
    if (!t.is_object()) t = json::object();
    if (!originals.contains(name))
      originals[name] = {{"nodeSelector", t.value("nodeSelector", json::object())},
                         {"tolerations", t.value("tolerations", json::array())}};
    const auto info = infos.find(name);
    if (info == infos.end()) continue;
    json selector = originals[name]["nodeSelector"];
    for (const auto& [k, v] : info->second.node_selector) {
      if (selector.contains(k) && selector[k] != v)
        return "Kueue admitted pool entry " + name + " on a flavor whose nodes have " + k + "=" + v +
               ", but the entry's podTemplate selects " + k + "=" + selector[k].dump() +
               ": remove it from the podTemplate or change the ClusterQueue's flavors";
      selector[k] = v;
    }
    json tolerations = originals[name]["tolerations"];
    add_tolerations(tolerations, info->second.tolerations);
    t["nodeSelector"] = selector;
    t["tolerations"] = tolerations;
  }
  annotations[KUEUE_ORIGINAL_TEMPLATES_ANNOTATION] = originals.dump();
  updated["spec"]["runPolicy"]["suspend"] = false;
  job_object = std::move(updated);
  return std::nullopt;
}

void evicted_job(json& job_object) {
  json& meta = job_object["metadata"];
  if (meta.contains("annotations") && meta["annotations"].contains(KUEUE_ORIGINAL_TEMPLATES_ANNOTATION)) {
    json originals = json::parse(meta["annotations"][KUEUE_ORIGINAL_TEMPLATES_ANNOTATION].get<std::string>(), nullptr, false);
    if (originals.is_object())
      for (json* e : entry_objects(job_object)) {
        const std::string name = e->value("name", "");
        if (!originals.contains(name) || !e->contains("podTemplate")) continue;
        json& t = (*e)["podTemplate"];
        for (const char* key : {"nodeSelector", "tolerations"}) {
          const json& v = originals[name][key];
          if (v.empty()) t.erase(key);
          else t[key] = v;
        }
        if (t.empty()) e->erase("podTemplate");
      }
    meta["annotations"].erase(KUEUE_ORIGINAL_TEMPLATES_ANNOTATION);
  }
  job_object["spec"]["runPolicy"]["suspend"] = true;
}

void set_kueue_condition(json& workload, const std::string& type, bool status, const std::string& reason,
                         const std::string& message, const std::string& now) {
  json& conditions = workload["status"]["conditions"];
  if (!conditions.is_array()) conditions = json::array();
  const std::string value = status ? "True" : "False";
  json c = {{"type", type}, {"status", value}, {"reason", reason}, {"message", message}, {"lastTransitionTime", now}};
  if (workload["metadata"].contains("generation")) c["observedGeneration"] = workload["metadata"]["generation"];
  for (json& have : conditions)
    if (have.value("type", "") == type) {
      if (have.value("status", "") == value) c["lastTransitionTime"] = have.value("lastTransitionTime", now);
      have = c;
      return;
    }
  conditions.push_back(c);
}

std::optional<json> pods_ready_workload(const json& workload, int64_t ready, int64_t want, const std::string& now) {
  const json* c = find_condition(workload, "PodsReady");
  const std::string was = c != nullptr ? c->value("reason", "") : "";
  const bool all = want > 0 && ready >= want;
  const bool lost_before = c != nullptr && (c->value("status", "") == "True" || was == "WaitForRecovery");
  const bool recovering = was == "WaitForRecovery" || was == "Recovered";
  const std::string reason = all ? (recovering ? "Recovered" : "Started") : (lost_before ? "WaitForRecovery" : "WaitForStart");
  if (c != nullptr && c->value("status", "") == (all ? "True" : "False") && was == reason) return std::nullopt;
  json updated = workload;
  set_kueue_condition(updated, "PodsReady", all, reason,
                      all ? "all " + std::to_string(want) + " worker pods are running"
                          : std::to_string(ready) + " of " + std::to_string(want) + " worker pods are running",
                      now);
  return updated;
}

json finished_workload(json workload, const std::string& reason, const std::string& message, const std::string& now) {
  set_kueue_condition(workload, "Finished", true, reason, message, now);
  return workload;
}

json released_workload(json workload, const std::string& now) {
  const KueueState s = kueue_state(workload);
  const bool requeued = s.evicted_reason == "Preempted" || s.evicted_reason == "NodeFailures";
  workload["status"].erase("admission");
  set_kueue_condition(workload, "Requeued", requeued, s.evicted_reason.empty() ? "Evicted" : s.evicted_reason,
                      requeued ? "the workload is requeued after " + s.evicted_reason : "evicted: " + s.evicted_message, now);
  set_kueue_condition(workload, "QuotaReserved", false, "PendingEvaluation",
                      "the job's pods are gone: its quota is released", now);
  set_kueue_condition(workload, "Admitted", false, "NoReservation", "the workload has no reservation", now);
  return workload;
}

}  // namespace qsync::reconciler
