// File: operator/reconciler/cluster_reader.cpp
// Reading jobs, children, ConfigMaps and Nodes from the API or the informers (see cluster_reader.h).
#include "operator/reconciler/cluster_reader.h"

#include "operator/api/group_version.h"
#include "operator/reconciler/desired_children.h"

namespace qsync::reconciler {
namespace {

using json = nlohmann::json;

bool in_namespace(const json& o, const std::string& ns) { return o["metadata"].value("namespace", "") == ns; }

const kube::ResourceType& workload_type(const std::string& kind) {
  return kind == "StatefulSet" ? kube::stateful_sets_type() : kube::deployments_type();
}

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
  for (json& c : informers_.config_maps->list())
    if (in_namespace(c, ns)) out.push_back(std::move(c));
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
std::vector<json> InformerClusterReader::all_pods() { return informers_.pods->list(); }

}  // namespace qsync::reconciler
