// File: operator/reconciler/worker_pod_settings.h
// What a worker Pod takes from the cluster's policy rather than from the plan's mechanics: the
// pod template (the operator's defaults, then spec.podTemplate, then the pool entry's:
// planner/job_pod_template.h), the container's resources (from the plan, overridable by
// spec.resources), and the node placement (pinned to the planned node, or, when Kueue or a
// gang scheduler places the pods, any of the nodes planned for ranks of the same entry and
// device class).
//
// Resources: requests cpu 1 and memory = the plan's predicted peak (CPU classes; GPU classes:
// the host side, a fixed 2Gi) x 1.25 + 512Mi, the memory limit equal to it (an under-predicted
// worker is OOM-killed and restarts from its checkpoint instead of starving its node's other
// pods); GPU ranks request and limit gpusPerRank nvidia.com/gpu. spec.resources replaces any
// of these key by key (a memory request given without a limit drops the computed limit).
//
//   apply_pod_template(pod, worker_pod_template(job, rank, options, on_gpu));
#pragma once

#include <cstdint>

#include <nlohmann/json.hpp>

#include "operator/api/hybrid_training_job.h"
#include "operator/reconciler/pool_discovery.h"
#include "planner/job_pod_template.h"

namespace qsync::reconciler {

struct ChildOptions;

// Kueue's queue label: a job carrying it waits for Kueue's admission (job_admission.h).
inline constexpr const char* KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name";
inline constexpr int64_t HOST_MEMORY_GPU_RANK = 2ll << 30;  // CUDA context, pinned staging, the host copy
inline constexpr double MEMORY_HEADROOM = 1.25;
inline constexpr int64_t MEMORY_HEADROOM_BYTES = 512ll << 20;

// The rank's template: options' defaults (GPU ranks: options.gpu_tolerations; a gang-scheduled
// job: options.gang_scheduler_name, else its gang scheduler's usual schedulerName), the job's,
// the entry's.
PodTemplateSpec worker_pod_template(const api::HybridTrainingJob& job, const DiscoveredRank& rank,
                                    const ChildOptions& options, bool on_gpu);

// Writes the template into a worker Pod (one container "worker"): labels and annotations (the
// operator's keys kept), nodeSelector, affinity (required node terms ANDed with the pod's own),
// tolerations, priority class, service account, scheduler, pull secrets, env, volumes, mounts.
void apply_pod_template(nlohmann::json& pod, const PodTemplateSpec& t);

// The worker container's resources (see above).
nlohmann::json worker_resources(const api::HybridTrainingJob& job, const DiscoveredRank& rank, bool on_gpu);

// Whether another scheduler places the pods: the job has Kueue's queue label, or its template
// names a scheduler. Then pods get affinity to the planned nodes, not one pinned host each.
bool scheduler_places_pods(const api::HybridTrainingJob& job, const PodTemplateSpec& merged);

// Kueue's pod sets, one per pool entry with ranks: count, and what each pod requests before a
// plan exists: cpu (1 or spec.resources), nvidia.com/gpu (gpusPerRank; default 1 unless the
// entry names a CPU class), memory (spec.resources, else GPU entries' host side as above).
std::vector<api::PodSetStatus> kueue_pod_sets(const api::HybridTrainingJob& job);

// Required node affinity of a rank: its planned node, or (scheduler_places_pods) any node
// planned for a rank of the same entry and device class in `planned` (the plan's ranks).
nlohmann::json placement_affinity(const DiscoveredRank& rank, const std::vector<DiscoveredRank>& planned, bool by_scheduler);

}  // namespace qsync::reconciler
