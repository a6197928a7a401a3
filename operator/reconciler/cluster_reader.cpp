// File: operator/reconciler/cluster_reader.cpp
// Reading jobs, children, ConfigMaps and Nodes from the API or the informers (see cluster_reader.h).
#include "operator/reconciler/cluster_reader.h"

#include <set>

#include "operator/api/group_version.h"
#include "operator/reconciler/desired_children.h"

namespace qsync::reconciler {
namespace {

using json = nlohmann::json;

bool in_namespace(const json& o, const std::string& ns) { return o["metadata"].value("namespace", "") == ns; }

const kube::ResourceType& workload_type(const std::string& kind) {
  return kind == "StatefulSet" ? kube::stateful_sets_type() : kube::deployments_type();
}

const std::string ACTIVE_PODS = "status.phase!=Succeeded,status.phase!=Failed";
const std::string ANY_VERSION = "0";

bool labelled_for(const json& o, const std::string& job) {
  const json& labels = o["metadata"].value("labels", json::object());
  return labels.contains(JOB_LABEL) && labels[JOB_LABEL] == job;
}

}  // namespace

const kube::ResourceType& hybrid_training_jobs_type() {
  static const kube::ResourceType type{api::GROUP, api::VERSION, api::PLURAL, api::KIND, true};
  return type;
}

std::optional<json> ApiClusterReader::job(const std::string& ns, const std::string& name) {
  return client_.get_if_exists(hybrid_training_jobs_type(), ns, name);
}
std::vector<json> ApiClusterReader::job_pods(const std::string& ns, const std::string& job) {
  kube::ListOptions options;
  options.label_selector = std::string(JOB_LABEL) + "=" + job;
  return client_.list(kube::pods_type(), ns, options).items;
}
std::optional<json> ApiClusterReader::service(const std::string& ns, const std::string& name) {
  return client_.get_if_exists(kube::services_type(), ns, name);
}
std::optional<json> ApiClusterReader::config_map(const std::string& ns, const std::string& name) {
  return client_.get_if_exists(kube::config_maps_type(), ns, name);
}
std::vector<json> ApiClusterReader::config_maps(const std::string& ns) {
  return client_.list(kube::config_maps_type(), ns).items;
}
std::vector<json> ApiClusterReader::nodes() { return client_.list(kube::nodes_type(), "").items; }
std::optional<json> ApiClusterReader::workload(const std::string& ns, const std::string& kind, const std::string& name) {
  return client_.get_if_exists(workload_type(kind), ns, name);
}
std::vector<json> ApiClusterReader::workloads(const std::string& ns, const std::string& kind) {
  return client_.list(workload_type(kind), ns).items;
}
std::vector<json> ApiClusterReader::all_pods() { return client_.list(kube::pods_type(), "").items; }

std::optional<json> InformerClusterReader::job(const std::string& ns, const std::string& name) {
  return client_.get_if_exists(hybrid_training_jobs_type(), ns, name);
}
std::vector<json> InformerClusterReader::job_pods(const std::string& ns, const std::string& job) {
  std::vector<json> out;
  for (json& p : informers_.pods->list())
    if (in_namespace(p, ns) && labelled_for(p, job)) out.push_back(std::move(p));
  return out;
}
std::optional<json> InformerClusterReader::service(const std::string& ns, const std::string& name) {
  return informers_.services->get(kube::object_key(ns, name));
}
std::optional<json> InformerClusterReader::config_map(const std::string& ns, const std::string& name) {
  return informers_.config_maps->get(kube::object_key(ns, name));
}
std::vector<json> InformerClusterReader::config_maps(const std::string& ns) {
  std::vector<json> out;
  std::set<std::string> seen;  // a ConfigMap may carry several of the labels
  std::vector<controller::Informer*> all = {informers_.config_maps};
  all.insert(all.end(), informers_.input_config_maps.begin(), informers_.input_config_maps.end());
  for (controller::Informer* i : all)
    for (json& c : i->list())
      if (in_namespace(c, ns) && seen.insert(c["metadata"].value("name", "")).second) out.push_back(std::move(c));
  return out;
}
std::vector<json> InformerClusterReader::nodes() { return informers_.nodes->list(); }
std::optional<json> InformerClusterReader::workload(const std::string& ns, const std::string& kind, const std::string& name) {
  controller::Informer* i = kind == "StatefulSet" ? informers_.stateful_sets : informers_.deployments;
  return i == nullptr ? std::nullopt : i->get(kube::object_key(ns, name));
}
std::vector<json> InformerClusterReader::workloads(const std::string& ns, const std::string& kind) {
  controller::Informer* i = kind == "StatefulSet" ? informers_.stateful_sets : informers_.deployments;
  std::vector<json> out;
  if (i == nullptr) return out;
  for (json& w : i->list())
    if (in_namespace(w, ns)) out.push_back(std::move(w));
  return out;
}
std::vector<json> InformerClusterReader::all_pods() {
  // Finished pods hold no GPUs; resourceVersion 0: any recent state (the API server's watch cache).
  kube::ListOptions options;
  options.field_selector = ACTIVE_PODS;
  options.resource_version = ANY_VERSION;
  return client_.list(kube::pods_type(), informers_.pods_namespace, options).items;
}

}  // namespace qsync::reconciler
