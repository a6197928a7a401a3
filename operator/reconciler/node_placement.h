// File: operator/reconciler/node_placement.h
// What a node can take of a job, as kube-scheduler's filters see it: free GPUs (allocatable
// nvidia.com/gpu minus what other unfinished pods bound to it request), free CPU (allocatable
// cpu minus other pods' cpu requests), and the taints the job's pods do not tolerate
// (NoSchedule and NoExecute; PreferNoSchedule only scores). Pool discovery (pool_discovery.h)
// places at most as many ranks on a node as these hold, and skips nodes whose taints the
// entry's pods do not tolerate, saying so. Pure: the reconciler reads Nodes and Pods.
//
//   const PlacementLimits limits = placement_limits(nodes, all_pods, job_uid, job, gpu_tolerations);
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "operator/api/hybrid_training_job.h"

namespace qsync::reconciler {

struct PlacementLimits {
  std::map<std::string, int64_t> free_gpus;  // node -> GPUs free of other pods (nodes without nvidia.com/gpu: absent)
  std::map<std::string, double> free_cpus;   // node -> cores free of other pods' requests (no allocatable cpu: absent)
  double cpu_per_rank = 1;                   // each worker's cpu request (worker_pod_settings.h)
  std::map<std::string, nlohmann::json> entry_tolerations;  // entry -> its pods' tolerations (job's + entry's)
  // entry -> its pods' podTemplate nodeSelector (job's + entry's; e.g. what Kueue's admission
  // injected): a node must carry these labels too.
  std::map<std::string, std::map<std::string, std::string>> entry_node_selectors;
  nlohmann::json gpu_tolerations = nlohmann::json::array();  // added for GPU ranks (--gpu-tolerations)
};

// "2", "1.5", "500m" -> cores. Throws std::invalid_argument naming `what`.
double cpu_quantity(const std::string& q, const std::string& what);

// Whether `toleration` tolerates `taint` (Kubernetes' rules: empty effect matches every effect;
// operator Exists matches any value, and with an empty key every taint; Equal, the default,
// needs key and value equal).
bool tolerates(const nlohmann::json& toleration, const nlohmann::json& taint);

// The node's NoSchedule/NoExecute taints no toleration in `tolerations` tolerates.
std::vector<nlohmann::json> untolerated_taints(const nlohmann::json& node, const nlohmann::json& tolerations);
// "key=value:Effect" (no "=value" when empty).
std::string taint_text(const nlohmann::json& taint);

// The limits for `job`: free GPUs and CPU of `nodes` given `pods` (every pod; the job's own,
// by controller uid, are not counted), each entry's tolerations, the GPU defaults.
PlacementLimits placement_limits(const std::vector<nlohmann::json>& nodes, const std::vector<nlohmann::json>& pods,
                                 const std::string& job_uid, const api::HybridTrainingJob& job,
                                 const nlohmann::json& gpu_tolerations);

}  // namespace qsync::reconciler
