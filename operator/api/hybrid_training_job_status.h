// File: operator/api/hybrid_training_job_status.h
// The HybridTrainingJob's .status as C++ types, and its JSON form (the status subresource the
// operator writes). Fields are those of the status part of the field table (status_fields.cpp).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "operator/api/conditions.h"

namespace qsync::api {

inline constexpr const char* PHASE_PENDING = "Pending";
inline constexpr const char* PHASE_PLANNING = "Planning";
inline constexpr const char* PHASE_RUNNING = "Running";
inline constexpr const char* PHASE_RESTARTING = "Restarting";
inline constexpr const char* PHASE_RESIZING = "Resizing";  // elastic: checkpoint, re-plan, restart at the new size
inline constexpr const char* PHASE_WAITING = "Waiting";    // elastic: fewer ranks than elasticPolicy.minRanks
inline constexpr const char* PHASE_SUSPENDED = "Suspended";
inline constexpr const char* PHASE_SUCCEEDED = "Succeeded";
inline constexpr const char* PHASE_FAILED = "Failed";

struct RankPlan {
  int64_t rank = 0;
  std::string node;
  std::string device_class;
  std::string precision_mix;  // layers per precision: "fp32:4 int8:2"
  int64_t local_batch = 0;
  double predicted_step_seconds = 0;

  bool operator==(const RankPlan&) const = default;
};

struct PlanSummary {
  std::string strategy;  // the allocator
  double predicted_step_seconds = 0;
  double step_time_target_seconds = 0;
  std::string config_map;  // holds the plan files
  std::vector<RankPlan> ranks;

  bool operator==(const PlanSummary&) const = default;
};

struct ReplicaCounts {
  int64_t total = 0, active = 0, succeeded = 0, failed = 0;

  bool operator==(const ReplicaCounts&) const = default;
};

// One borrowing entry's lending state (docs/borrowing.md); the operator's memory of it between
// passes (when it last changed the workload, the reclaim in progress).
struct LendingStatus {
  std::string entry, workload, state, reason, message;
  int64_t serving_replicas = 0, target_replicas = 0, ready_replicas = 0, needed_replicas = 0, borrowed_devices = 0;
  std::optional<double> demand;
  std::string last_change_time, reclaim_start_time;  // MicroTime, "" when none
  int64_t reclaim_target_replicas = 0;
  std::string reclaim_reason;
  int64_t reclaims = 0, reclaims_missed = 0;
  std::optional<double> last_reclaim_seconds;

  bool operator==(const LendingStatus&) const = default;
};

struct ResizeStatus {
  std::string time, reason, message;
  int64_t from_ranks = 0, to_ranks = 0, checkpoint_step = 0;

  bool operator==(const ResizeStatus&) const = default;
};

// One pool entry's pods, as Kueue's pod sets count them.
struct PodSetStatus {
  std::string name;
  int64_t count = 0;
  std::map<std::string, std::string> requests;

  bool operator==(const PodSetStatus&) const = default;
};

struct HybridTrainingJobStatus {
  std::string phase;  // "" until the operator first writes status
  std::string message;
  int64_t observed_generation = 0;
  std::vector<Condition> conditions;
  std::optional<PlanSummary> plan;
  ReplicaCounts replicas;
  int64_t restarts = 0;
  int64_t last_checkpoint_step = 0;
  std::string start_time;       // RFC 3339, "" until the workers start
  std::string completion_time;  // RFC 3339, "" until the job finishes
  int64_t borrowed_devices = 0;
  int64_t resizes = 0;  // a resize is a new attempt too: pods are labelled restarts + resizes
  std::optional<ResizeStatus> last_resize;
  std::vector<LendingStatus> lending;
  std::vector<PodSetStatus> pod_sets;  // jobs queued in Kueue (kueue.x-k8s.io/queue-name)

  bool operator==(const HybridTrainingJobStatus&) const = default;
};

// Reads .status; throws std::invalid_argument naming the field when it breaks the schema.
HybridTrainingJobStatus hybrid_training_job_status_from_json(const nlohmann::json& status);

// Writes .status: counts always, strings and the plan only when set.
nlohmann::json to_json(const HybridTrainingJobStatus& status);

}  // namespace qsync::api
