// File: operator/api/conditions.h
// Status conditions in the shape of metav1.Condition, and the helpers a reconciler sets them
// with. The rules users asked for (kubeflow/trainer#1711, #2351): lastTransitionTime moves only
// when a condition's status changes; Running and Restarting exclude each other
// (set_exclusive_running); Succeeded and Failed are terminal (is_finished), and a reconciler
// stops changing a finished job's conditions.
//
//   set_condition(status.conditions, CONDITION_PLANNED, CONDITION_TRUE, "PlanReady",
//                 "2 ranks, predicted 0.31 s/step", job.generation(), now);
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace qsync::api {

struct Condition {
  std::string type;
  std::string status;  // "True", "False" or "Unknown"
  std::string reason;  // CamelCase
  std::string message;
  std::string last_transition_time;  // RFC 3339
  int64_t observed_generation = 0;

  bool operator==(const Condition&) const = default;
};

inline constexpr const char* CONDITION_CREATED = "Created";
inline constexpr const char* CONDITION_PLANNED = "Planned";
inline constexpr const char* CONDITION_RUNNING = "Running";
inline constexpr const char* CONDITION_RESTARTING = "Restarting";
inline constexpr const char* CONDITION_SUSPENDED = "Suspended";
inline constexpr const char* CONDITION_SUCCEEDED = "Succeeded";
inline constexpr const char* CONDITION_FAILED = "Failed";

inline constexpr const char* CONDITION_TRUE = "True";
inline constexpr const char* CONDITION_FALSE = "False";
inline constexpr const char* CONDITION_UNKNOWN = "Unknown";

// Adds the condition or updates it in place. lastTransitionTime becomes `now` (RFC 3339) when
// the condition is new or its status changes, and stays otherwise; reason, message and
// observedGeneration always take the new values. Returns whether anything changed, so a
// reconciler writes status only when it must. Throws std::invalid_argument on a status other
// than True, False or Unknown, or an empty type or reason.
bool set_condition(std::vector<Condition>& conditions, const std::string& type, const std::string& status,
                   const std::string& reason, const std::string& message, int64_t observed_generation,
                   const std::string& now);

// Sets `running_or_restarting` (CONDITION_RUNNING or CONDITION_RESTARTING) True and the other
// False with the same reason and message. Returns whether anything changed; throws
// std::invalid_argument for any other type.
bool set_exclusive_running(std::vector<Condition>& conditions, const std::string& running_or_restarting,
                           const std::string& reason, const std::string& message, int64_t observed_generation,
                           const std::string& now);

// The condition of that type, or nullptr.
const Condition* find_condition(const std::vector<Condition>& conditions, const std::string& type);

// Whether the condition is present with status True.
bool is_true(const std::vector<Condition>& conditions, const std::string& type);

// Whether Succeeded or Failed is True: the job is finished and its conditions are final.
bool is_finished(const std::vector<Condition>& conditions);

}  // namespace qsync::api
