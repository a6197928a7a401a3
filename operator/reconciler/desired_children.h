// File: operator/reconciler/desired_children.h
// The objects a HybridTrainingJob owns, as pure functions of the job and its plan: the headless
// Service `<job>-workers` (DNS for the ranks, port 29500 "rendezvous"), the plan ConfigMap
// `<job>-plan` (rank-<r>.yaml per rank and plan.json, annotated with the generation and attempt
// it was planned for) and one Pod per rank `<job>-worker-<rank>` (env MASTER_ADDR = rank 0's DNS
// name, MASTER_PORT, RANK, WORLD_SIZE; the qsync-worker train command; the plan, checkpoint and
// data volumes; node affinity to the planned node; GPU and CPU/memory resources from the plan;
// the pod template (worker_pod_settings.h); a gang-scheduled job's pod-group label (pod_group.h); restartPolicy Never; the restricted security context). Every child carries a controller owner reference to
// the job, so the garbage collector deletes it with the job.
//
//   const json pod = desired_pod(job_object, job, plan.ranks[r], plan.ranks.size(), attempt, options);
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "operator/api/hybrid_training_job.h"
#include "operator/reconciler/job_planning.h"

namespace qsync::reconciler {

inline constexpr const char* JOB_LABEL = "qsync.dev/job";
inline constexpr const char* RANK_LABEL = "qsync.dev/rank";
inline constexpr const char* ATTEMPT_LABEL = "qsync.dev/attempt";
inline constexpr const char* POOL_KIND_LABEL = "qsync.dev/pool-kind";
inline constexpr const char* GENERATION_ANNOTATION = "qsync.dev/generation";
inline constexpr const char* ATTEMPT_ANNOTATION = "qsync.dev/attempt";
// The WORLD_SIZE a pod was created with: a pod of another world size is never kept beside the
// current plan's (a changed count restarts every rank, job_reconciler.h).
inline constexpr const char* WORLD_SIZE_ANNOTATION = "qsync.dev/world-size";
inline constexpr const char* WORKER_BINARY = "/usr/local/bin/qsync-worker";
inline constexpr const char* PLAN_MOUNT = "/etc/qsync/plan";
inline constexpr const char* MODEL_MOUNT = "/etc/qsync/model";
inline constexpr const char* CHECKPOINT_MOUNT = "/var/lib/qsync/checkpoints";
inline constexpr const char* DATA_MOUNT = "/var/lib/qsync/data";
// The worker writes {"steps", "checkpointStep", "stoppedEarly", "error"} here at exit; the
// reconciler reads it back from the container's terminated state (status.lastCheckpointStep).
inline constexpr const char* TERMINATION_LOG = "/dev/termination-log";
inline constexpr int WORKER_METRICS_PORT = 9100;
inline constexpr const char* GPU_RESOURCE = "nvidia.com/gpu";

struct ChildOptions {
  std::string worker_image;  // --worker-image: used when the job keeps the CRD's default image
  std::string gpu_worker_image;   // --gpu-worker-image: GPU ranks' image in that case ("": worker_image)
  bool gpu_ranks_on_cpu = false;  // --gpu-ranks-on-cpu: GPU ranks run as the worker's default CPU class
  int master_port = 29500;   // MASTER_PORT and the rendezvous port
  // --gpu-tolerations: tolerations every GPU rank's pod gets (the chart's default tolerates the
  // usual nvidia.com/gpu taint); the job's podTemplate adds its own.
  nlohmann::json gpu_tolerations = nlohmann::json::array();
  // --gang-scheduler-name: the schedulerName of gang-scheduled jobs' pods whose podTemplate
  // names none ("": the gang scheduler's usual name, planner/job_scheduling_policy.h).
  std::string gang_scheduler_name;
};

std::string service_name(const std::string& job);      // <job>-workers
std::string plan_config_map_name(const std::string& job);  // <job>-plan
std::string pod_name(const std::string& job, int64_t rank);  // <job>-worker-<rank>
// rank 0's DNS name: <job>-worker-0.<job>-workers.<ns>.svc
std::string master_address(const std::string& job, const std::string& ns);
// The image a rank runs: spec.image, or (when spec.image is the CRD's default) options'
// gpu_worker_image for a GPU rank, else options.worker_image, when given.
std::string worker_image(const api::HybridTrainingJob& job, const ChildOptions& options, bool gpu_rank = false);
// Whether the rank runs on its GPU: a GPU class, unless options.gpu_ranks_on_cpu.
bool rank_runs_on_gpu(const DiscoveredRank& rank, const ChildOptions& options);

// `job_object` is the job as the API returned it (its apiVersion, kind, name and uid make the
// owner reference); `job` its parsed form.
nlohmann::json desired_service(const nlohmann::json& job_object, const api::HybridTrainingJob& job,
                               const ChildOptions& options);
nlohmann::json desired_plan_config_map(const nlohmann::json& job_object, const api::HybridTrainingJob& job,
                                       const JobPlan& plan, int64_t attempt);
// `planned`: every rank of the plan (placement_affinity in worker_pod_settings.h); empty: the
// rank alone.
nlohmann::json desired_pod(const nlohmann::json& job_object, const api::HybridTrainingJob& job,
                           const DiscoveredRank& rank, int64_t world_size, int64_t attempt, const ChildOptions& options,
                           const std::vector<DiscoveredRank>& planned = {});
// The qsync-worker command line of a rank (desired_pod's container command): --device-class is
// the rank's class, GPU classes included (the worker checks its GPU against it at start), except
// a GPU rank under options.gpu_ranks_on_cpu, which runs as the worker's default CPU class.
std::vector<std::string> worker_command(const api::HybridTrainingJob& job, const DiscoveredRank& rank,
                                        const ChildOptions& options = {});

}  // namespace qsync::reconciler
