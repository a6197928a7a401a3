// File: tests/operator/cluster_objects.h
// Kubernetes objects the operator's tests put into the API test server: a Ready Node with the
// labels the job's pools select on, a HybridTrainingJob with one training and one inference
// pool, scheduler-plugins' PodGroup CRD (gang scheduling) and Kueue's Workload and
// ResourceFlavor CRDs. Tests add what they need on top (spec.merge_patch, more labels, allocatable resources).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace qsync::operator_test {

// A v1 Node named `name` with `labels`, status.conditions Ready=True, and `allocatable` as its
// status.allocatable unless empty (then the node has none).
nlohmann::json ready_node(const std::string& name, const nlohmann::json& labels,
                          const nlohmann::json& allocatable = nlohmann::json::object());

// A HybridTrainingJob spec for the zoo model `zoo`: 20 steps, global batch 64, the greedy
// allocator, one training group ("train", 1 node with qsync.dev/pool=`training_pool`) and one
// inference group ("infer", 1 node with qsync.dev/pool=`inference_pool`).
nlohmann::json two_pool_job_spec(const std::string& zoo, const std::string& training_pool,
                                 const std::string& inference_pool);

// A qsync.dev/v1alpha1 HybridTrainingJob named `name` in namespace "default" with `spec`.
nlohmann::json hybrid_training_job(const std::string& name, const nlohmann::json& spec);

// The PodGroup CRD of kubernetes-sigs/scheduler-plugins (scheduling.x-k8s.io/v1alpha1
// podgroups, namespaced, a status subresource): spec.minMember, minResources and
// scheduleTimeoutSeconds as its schema has them, status kept whole.
nlohmann::json pod_group_crd();

// Kueue's Workload (kueue.x-k8s.io/v1beta2 workloads, namespaced, a status subresource) and
// ResourceFlavor (resourceflavors, cluster-scoped) CRDs; spec and status kept whole.
nlohmann::json kueue_workload_crd();
nlohmann::json kueue_resource_flavor_crd();
// A ResourceFlavor named `name` whose nodes carry `node_labels`, its pods `tolerations`.
nlohmann::json resource_flavor(const std::string& name, const nlohmann::json& node_labels,
                               const nlohmann::json& tolerations = nlohmann::json::array());

}  // namespace qsync::operator_test
