// File: operator/reconciler/cluster_reader.h
// Where the reconciler reads the cluster from. The job itself always comes from the API (a fresh
// resourceVersion for the status write); its children, Nodes, the namespace's ConfigMaps, and
// for borrowing the inference workloads (Deployments, StatefulSets) and every pod (GPU
// accounting) come
// from the manager's informer caches in the operator (InformerClusterReader), or straight from
// the API in tests and tools (ApiClusterReader). A stale cache is safe: child names are
// deterministic, so a create the cache has not seen yet answers AlreadyExists.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "operator/controller/informer.h"
#include "operator/kube/kube_client.h"

namespace qsync::reconciler {

// The HybridTrainingJob resource (qsync.dev/v1alpha1 hybridtrainingjobs, namespaced).
const kube::ResourceType& hybrid_training_jobs_type();

class ClusterReader {
 public:
  virtual ~ClusterReader() = default;
  virtual std::optional<nlohmann::json> job(const std::string& ns, const std::string& name) = 0;
  // Pods labelled qsync.dev/job=<job> in ns.
  virtual std::vector<nlohmann::json> job_pods(const std::string& ns, const std::string& job) = 0;
  virtual std::optional<nlohmann::json> service(const std::string& ns, const std::string& name) = 0;
  virtual std::optional<nlohmann::json> config_map(const std::string& ns, const std::string& name) = 0;
  virtual std::vector<nlohmann::json> config_maps(const std::string& ns) = 0;
  virtual std::vector<nlohmann::json> nodes() = 0;
  // kind: "Deployment" or "StatefulSet".
  virtual std::optional<nlohmann::json> workload(const std::string& ns, const std::string& kind, const std::string& name) = 0;
  virtual std::vector<nlohmann::json> workloads(const std::string& ns, const std::string& kind) = 0;
  // Every pod the operator watches (all namespaces, or the one it was started for).
  virtual std::vector<nlohmann::json> all_pods() = 0;
};

class ApiClusterReader : public ClusterReader {
 public:
  explicit ApiClusterReader(kube::KubeClient& client) : client_(client) {}
  std::optional<nlohmann::json> job(const std::string& ns, const std::string& name) override;
  std::vector<nlohmann::json> job_pods(const std::string& ns, const std::string& job) override;
  std::optional<nlohmann::json> service(const std::string& ns, const std::string& name) override;
  std::optional<nlohmann::json> config_map(const std::string& ns, const std::string& name) override;
  std::vector<nlohmann::json> config_maps(const std::string& ns) override;
  std::vector<nlohmann::json> nodes() override;
  std::optional<nlohmann::json> workload(const std::string& ns, const std::string& kind, const std::string& name) override;
  std::vector<nlohmann::json> workloads(const std::string& ns, const std::string& kind) override;
  std::vector<nlohmann::json> all_pods() override;

 private:
  kube::KubeClient& client_;
};

// Children, ConfigMaps and Nodes from informers (which must outlive the reader); the job from
// the API. The child informers hold only what the operator owns (label qsync.dev/job), the
// ConfigMap informers only the labelled inputs of planning; every active Pod of `pods_namespace`
// ("" : all namespaces), which GPU accounting needs, is listed from the API when asked for
// (planning and lending passes) rather than cached: a cluster's Pods outnumber a job's.
struct ClusterInformers {
  controller::Informer* pods = nullptr;          // the operator's pods (qsync.dev/job)
  controller::Informer* services = nullptr;      // the operator's services (qsync.dev/job)
  controller::Informer* config_maps = nullptr;   // the operator's plan ConfigMaps (qsync.dev/job)
  std::vector<controller::Informer*> input_config_maps;  // device and comm profiles, calibrations (by label)
  std::string pods_namespace;                    // where all_pods() lists
  controller::Informer* nodes = nullptr;
  controller::Informer* deployments = nullptr;
  controller::Informer* stateful_sets = nullptr;
};

class InformerClusterReader : public ClusterReader {
 public:
  InformerClusterReader(kube::KubeClient& client, ClusterInformers informers) : client_(client), informers_(informers) {}
  std::optional<nlohmann::json> job(const std::string& ns, const std::string& name) override;
  std::vector<nlohmann::json> job_pods(const std::string& ns, const std::string& job) override;
  std::optional<nlohmann::json> service(const std::string& ns, const std::string& name) override;
  std::optional<nlohmann::json> config_map(const std::string& ns, const std::string& name) override;
  std::vector<nlohmann::json> config_maps(const std::string& ns) override;
  std::vector<nlohmann::json> nodes() override;
  std::optional<nlohmann::json> workload(const std::string& ns, const std::string& kind, const std::string& name) override;
  std::vector<nlohmann::json> workloads(const std::string& ns, const std::string& kind) override;
  std::vector<nlohmann::json> all_pods() override;

 private:
  kube::KubeClient& client_;
  ClusterInformers informers_;
};

}  // namespace qsync::reconciler
