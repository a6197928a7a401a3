// File: operator/reconciler/job_planning.h
// Planning a HybridTrainingJob: the pool from the Nodes (pool_discovery.h), a device profile per
// rank (a ConfigMap in the job's namespace labelled qsync.dev/device-profile: "true" whose
// profile.json is a `qsync-worker profile` output, chosen as ProfileStore chooses: this model's
// hash, the rank's batch or the nearest one scaled; else, for GPU classes, the built-in
// estimate), calibration statistics (a ConfigMap labelled qsync.dev/calibration: "true", key
// stats.json; else the fallback indicator), and the planner's allocate() with the job's
// allocator, step-time target and precisions. The result is a JobPlan: the status's plan
// summary, where each rank runs, and each rank's plan file. Its JSON form (plan.json in the plan
// ConfigMap) is what the reconciler builds the Pods from, so a restarted operator needs no
// re-planning.
//
//   const JobPlan plan = plan_job(job, {.nodes = nodes, .config_maps = config_maps});
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "operator/api/hybrid_training_job.h"
#include "operator/reconciler/pool_discovery.h"
#include "planner/device_profile.h"
#include "planner/plan_file.h"

namespace qsync::reconciler {

inline constexpr const char* PROFILE_LABEL = "qsync.dev/device-profile";
inline constexpr const char* PROFILE_KEY = "profile.json";
inline constexpr const char* CALIBRATION_LABEL = "qsync.dev/calibration";
inline constexpr const char* CALIBRATION_KEY = "stats.json";

struct PlanningInputs {
  std::vector<nlohmann::json> nodes;
  std::vector<nlohmann::json> config_maps;  // of the job's namespace: profiles, calibration, a model
  const PoolCapacity* capacity = nullptr;   // an elastic job's pool (pool_discovery.h); null: the spec's
  const PlacementLimits* limits = nullptr;  // free GPUs/CPU and taints (node_placement.h); null: unchecked
};

struct JobPlan {
  api::PlanSummary summary;
  std::vector<DiscoveredRank> ranks;  // where each rank runs
  std::vector<RankPlan> rank_files;   // each rank's plan file (empty when read back from plan.json)
  std::vector<std::string> notes;     // what the planner could not do, profiles skipped, ...
};

// Why a job cannot be planned. reason is the Planned condition's reason: ProfileMissing,
// ModelMissing, UnknownDeviceClass, UntoleratedTaints and InsufficientCapacity wait for the
// cluster to change (terminal() false);
// NoMatchingNodes, InvalidModel, InvalidPlanning and InfeasiblePlan fail the job.
class PlanningError : public std::runtime_error {
 public:
  PlanningError(std::string reason, const std::string& message, bool terminal)
      : std::runtime_error(message), reason_(std::move(reason)), terminal_(terminal) {}
  const std::string& reason() const { return reason_; }
  bool terminal() const { return terminal_; }

 private:
  std::string reason_;
  bool terminal_;
};

// Throws PlanningError (never anything else for a problem of the job or the cluster). With
// borrowed devices in the capacity whose plan is infeasible (they cannot hold their share of
// the batch), it plans without them and adds a note.
JobPlan plan_job(const api::HybridTrainingJob& job, const PlanningInputs& inputs);
// The same for exactly the pool discovered from the inputs (no fallback).
JobPlan plan_pool(const api::HybridTrainingJob& job, const PlanningInputs& inputs);

// The job's model: a zoo name, a file, or a ConfigMap key among `config_maps`. Throws PlanningError.
ModelDesc job_model(const api::HybridTrainingJob& job, const std::vector<nlohmann::json>& config_maps);

// The measured profiles in the labelled ConfigMaps whose names start with `name_prefix`
// (spec.planning.profiles; "": every one); ones that do not parse are skipped and named in
// `problems`.
struct ConfigMapProfiles {
  std::vector<DeviceProfile> profiles;
  std::vector<std::string> problems;
};
ConfigMapProfiles profiles_from_config_maps(const std::vector<nlohmann::json>& config_maps,
                                            const std::string& name_prefix = "");

// The profile of (model, class, batch): a measured one (exact batch, else the nearest scaled),
// else the estimate for GPU classes. Throws PlanningError ProfileMissing whose message holds
// the commands that measure and store the profile in `ns`.
// `model_ref` is how the job names the model (a zoo name or a path in the worker image).
DeviceProfile select_profile(const std::vector<DeviceProfile>& measured, const ModelDesc& model, const std::string& model_ref,
                             const std::string& device_class, int64_t batch, const std::string& ns);

// The commands that measure a profile and store it as a labelled ConfigMap.
std::string profile_missing_message(const ModelDesc& model, const std::string& model_ref, const std::string& device_class,
                                    int64_t batch, const std::string& ns);

// "fp32:4 int8:2": GEMM layers per precision under a rank's plan.
std::string precision_mix(const ModelDesc& model, const RankPlan& plan);

// plan.json, and back (throws std::invalid_argument naming the field).
nlohmann::json job_plan_to_json(const JobPlan& plan);
JobPlan job_plan_from_json(const nlohmann::json& plan_json);

}  // namespace qsync::reconciler
