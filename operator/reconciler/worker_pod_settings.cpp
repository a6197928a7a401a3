// File: operator/reconciler/worker_pod_settings.cpp
// A worker Pod's template, resources and placement (see worker_pod_settings.h).
#include "operator/reconciler/worker_pod_settings.h"

#include <algorithm>
#include <set>

#include "operator/reconciler/desired_children.h"
#include "operator/reconciler/pod_group.h"

namespace qsync::reconciler {
namespace {

using json = nlohmann::json;

const json::json_pointer REQUIRED_TERMS("/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms");

// Appends `extra` to the array at o[key], an item with the same `id` replacing the old one.
void append_items(json& o, const char* key, const json& extra, const char* id) {
  if (extra.empty()) return;
  json items = o.value(key, json::array());
  for (const json& item : extra) {
    auto same = std::find_if(items.begin(), items.end(), [&](const json& x) {
      return id != nullptr && x.contains(id) && item.contains(id) && x[id] == item[id];
    });
    if (same != items.end()) *same = item;
    else items.push_back(item);
  }
  o[key] = items;
}

std::string mebibytes(int64_t bytes) { return std::to_string((bytes + (1ll << 20) - 1) >> 20) + "Mi"; }

}  // namespace

PodTemplateSpec worker_pod_template(const api::HybridTrainingJob& job, const DiscoveredRank& rank, const ChildOptions& options,
                                    bool on_gpu) {
  PodTemplateSpec defaults;
  if (on_gpu || rank.gpus > 0) defaults.tolerations = options.gpu_tolerations;
  if (const GangScheduler* gang = job_gang_scheduler(job))
    defaults.scheduler_name = options.gang_scheduler_name.empty() ? gang->scheduler_name : options.gang_scheduler_name;
  PodTemplateSpec t = merge_pod_templates(defaults, job.spec.pod_template);
  const std::vector<api::PoolEntry>& entries = rank.pool_kind == POOL_KIND_INFERENCE ? job.spec.pool.inference : job.spec.pool.training;
  for (const api::PoolEntry& e : entries)
    if (e.name == rank.entry) t = merge_pod_templates(t, e.pod_template);
  return t;
}

void apply_pod_template(json& pod, const PodTemplateSpec& t) {
  json& meta = pod["metadata"];
  for (const auto& [k, v] : t.labels)
    if (!meta["labels"].contains(k)) meta["labels"][k] = v;
  for (const auto& [k, v] : t.annotations)
    if (!meta.contains("annotations") || !meta["annotations"].contains(k)) meta["annotations"][k] = v;
  json& spec = pod["spec"];
  for (const auto& [k, v] : t.node_selector) spec["nodeSelector"][k] = v;
  if (!t.affinity.empty()) {
    json affinity = spec.value("affinity", json::object());
    const json ours = affinity.contains(REQUIRED_TERMS) ? affinity[REQUIRED_TERMS] : json::array();
    const json theirs = t.affinity.contains(REQUIRED_TERMS) ? t.affinity[REQUIRED_TERMS] : json::array();
    for (const auto& [kind, value] : t.affinity.items()) {
      if (kind != "nodeAffinity") {
        affinity[kind] = value;
        continue;
      }
      for (const auto& [part, v] : value.items()) affinity["nodeAffinity"][part] = v;
    }
    const json terms = and_node_selector_terms(ours, theirs);
    if (!terms.empty()) affinity[REQUIRED_TERMS] = terms;
    spec["affinity"] = affinity;
  }
  append_items(spec, "tolerations", t.tolerations, nullptr);
  if (!t.priority_class_name.empty()) spec["priorityClassName"] = t.priority_class_name;
  if (!t.service_account_name.empty()) spec["serviceAccountName"] = t.service_account_name;
  if (!t.scheduler_name.empty()) spec["schedulerName"] = t.scheduler_name;
  for (const std::string& s : t.image_pull_secrets) spec["imagePullSecrets"].push_back({{"name", s}});
  append_items(spec, "volumes", t.volumes, "name");
  for (json& c : spec["containers"]) {
    if (c.value("name", "") != "worker") continue;
    append_items(c, "env", t.env, "name");
    append_items(c, "volumeMounts", t.volume_mounts, "mountPath");
  }
}

json worker_resources(const api::HybridTrainingJob& job, const DiscoveredRank& rank, bool on_gpu) {
  const int64_t working = on_gpu || rank.gpus > 0 ? HOST_MEMORY_GPU_RANK : rank.predicted_memory_bytes;
  const int64_t memory = int64_t(double(working) * MEMORY_HEADROOM) + MEMORY_HEADROOM_BYTES;
  json requests = {{"cpu", "1"}, {"memory", mebibytes(memory)}};
  json limits = {{"memory", mebibytes(memory)}};
  if (rank.gpus > 0) {
    requests[GPU_RESOURCE] = std::to_string(rank.gpus);
    limits[GPU_RESOURCE] = std::to_string(rank.gpus);
  }
  if (job.spec.resources) {
    for (const auto& [k, v] : job.spec.resources->requests) requests[k] = v;
    for (const auto& [k, v] : job.spec.resources->limits) limits[k] = v;
    // A request above the computed limit would make the pod invalid: the user's request decides.
    for (const char* k : {"memory", "cpu"})
      if (job.spec.resources->requests.count(k) && !job.spec.resources->limits.count(k)) limits.erase(k);
  }
  return {{"requests", requests}, {"limits", limits}};
}

std::vector<api::PodSetStatus> kueue_pod_sets(const api::HybridTrainingJob& job) {
  std::vector<api::PodSetStatus> out;
  for (const std::vector<api::PoolEntry>* entries : {&job.spec.pool.training, &job.spec.pool.inference})
    for (const api::PoolEntry& e : *entries) {
      const bool cpu_class = !e.device_class.empty() && !is_gpu_device_class(e.device_class);
      const int64_t gpus = e.gpus_per_rank.value_or(cpu_class ? 0 : 1);
      api::PodSetStatus set{e.name, e.count, {{"cpu", "1"}}};
      if (gpus > 0) {
        set.requests[GPU_RESOURCE] = std::to_string(gpus);
        set.requests["memory"] = mebibytes(int64_t(double(HOST_MEMORY_GPU_RANK) * MEMORY_HEADROOM) + MEMORY_HEADROOM_BYTES);
      }
      if (job.spec.resources)
        for (const auto& [k, v] : job.spec.resources->requests) set.requests[k] = v;
      out.push_back(std::move(set));
    }
  return out;
}

bool scheduler_places_pods(const api::HybridTrainingJob& job, const PodTemplateSpec& merged) {
  const json labels = job.metadata.value("labels", json::object());
  return labels.contains(KUEUE_QUEUE_LABEL) || !merged.scheduler_name.empty();
}

json placement_affinity(const DiscoveredRank& rank, const std::vector<DiscoveredRank>& planned, bool by_scheduler) {
  std::set<std::string> nodes = {rank.node};
  if (by_scheduler)
    for (const DiscoveredRank& r : planned)
      if (r.entry == rank.entry && r.device_class == rank.device_class && !r.node.empty()) nodes.insert(r.node);
  const json expression = {{"key", "kubernetes.io/hostname"}, {"operator", "In"}, {"values", json(std::vector<std::string>(nodes.begin(), nodes.end()))}};
  return {{"nodeAffinity",
           {{"requiredDuringSchedulingIgnoredDuringExecution",
             {{"nodeSelectorTerms", json::array({{{"matchExpressions", json::array({expression})}}})}}}}}};
}

}  // namespace qsync::reconciler
