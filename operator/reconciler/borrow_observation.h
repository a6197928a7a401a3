// File: operator/reconciler/borrow_observation.h
// What the lending decision observes, read from API objects (the pure functions in
// operator/lending take these typed observations; the simulation builds them from its model):
// a Deployment or StatefulSet and its pods as a WorkloadObservation, Nodes and Pods as GPU
// accounting input, and the annotations the operator keeps on a workload it borrows from:
//   qsync.dev/lendable: "true"            the owner opts the workload in (required)
//   qsync.dev/serving-replicas: "N"       the replicas to give back (written at the first scale-in)
//   qsync.dev/lending-replicas: "N"       the replicas the operator last set
//   qsync.dev/lent-to: "JOB"              the job (in the workload's namespace) borrowing it
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "operator/lending/gpu_accounting.h"
#include "operator/lending/lending_decision.h"

namespace qsync::reconciler {

inline constexpr const char* LENDABLE_ANNOTATION = "qsync.dev/lendable";
inline constexpr const char* SERVING_REPLICAS_ANNOTATION = "qsync.dev/serving-replicas";
inline constexpr const char* LENDING_REPLICAS_ANNOTATION = "qsync.dev/lending-replicas";
inline constexpr const char* LENT_TO_ANNOTATION = "qsync.dev/lent-to";

// An annotation's value ("" when absent).
std::string annotation_of(const nlohmann::json& object, const std::string& key);

// The workload's pods: those in its namespace matching spec.selector.matchLabels (and
// matchExpressions In/NotIn/Exists/DoesNotExist).
bool workload_selects(const nlohmann::json& workload, const nlohmann::json& pod);

// The observation of `workload` (null json: absent) borrowed by `job`: opted in only when
// annotated lendable and not lent to another job. `pods`: any pods; the workload's are picked.
lending::WorkloadObservation observe_workload(const nlohmann::json& workload, const std::vector<nlohmann::json>& pods,
                                              const std::string& job);

// nvidia.com/gpu one pod of the workload's template requests (limits, else requests; 0 when none).
int64_t workload_gpus_per_replica(const nlohmann::json& workload);

// Whether a pod is Pending because no node fits it (PodScheduled False, reason Unschedulable).
bool pod_unschedulable(const nlohmann::json& pod);

// Nodes and pods for free_gpus(): `job_uid` marks the job's own worker pods.
std::vector<lending::NodeObservation> observe_nodes(const std::vector<nlohmann::json>& nodes);
std::vector<lending::PodObservation> observe_pods(const std::vector<nlohmann::json>& pods, const std::string& job_uid);

}  // namespace qsync::reconciler
