// File: operator/api/conditions.cpp
// Condition bookkeeping (meta.SetStatusCondition's rules).
#include "operator/api/conditions.h"

#include <stdexcept>

namespace qsync::api {

bool set_condition(std::vector<Condition>& conditions, const std::string& type, const std::string& status,
                   const std::string& reason, const std::string& message, int64_t observed_generation,
                   const std::string& now) {
  if (type.empty()) throw std::invalid_argument("set_condition: the condition type is empty");
  if (reason.empty())
    throw std::invalid_argument("set_condition: condition " + type + " needs a reason (a CamelCase word, e.g. PlanReady)");
  if (status != CONDITION_TRUE && status != CONDITION_FALSE && status != CONDITION_UNKNOWN)
    throw std::invalid_argument("set_condition: condition " + type + " has status '" + status +
                                "'; use True, False or Unknown");
  for (Condition& c : conditions) {
    if (c.type != type) continue;
    const Condition before = c;
    if (c.status != status) {
      c.status = status;
      c.last_transition_time = now;
    }
    c.reason = reason;
    c.message = message;
    c.observed_generation = observed_generation;
    return !(c == before);
  }
  conditions.push_back({type, status, reason, message, now, observed_generation});
  return true;
}

bool set_exclusive_running(std::vector<Condition>& conditions, const std::string& running_or_restarting,
                           const std::string& reason, const std::string& message, int64_t observed_generation,
                           const std::string& now) {
  std::string other;
  if (running_or_restarting == CONDITION_RUNNING) other = CONDITION_RESTARTING;
  else if (running_or_restarting == CONDITION_RESTARTING) other = CONDITION_RUNNING;
  else
    throw std::invalid_argument("set_exclusive_running: '" + running_or_restarting + "' is neither Running nor Restarting");
  const bool set = set_condition(conditions, running_or_restarting, CONDITION_TRUE, reason, message, observed_generation, now);
  const bool cleared = set_condition(conditions, other, CONDITION_FALSE, reason, message, observed_generation, now);
  return set || cleared;
}

const Condition* find_condition(const std::vector<Condition>& conditions, const std::string& type) {
  for (const Condition& c : conditions)
    if (c.type == type) return &c;
  return nullptr;
}

bool is_true(const std::vector<Condition>& conditions, const std::string& type) {
  const Condition* c = find_condition(conditions, type);
  return c && c->status == CONDITION_TRUE;
}

bool is_finished(const std::vector<Condition>& conditions) {
  return is_true(conditions, CONDITION_SUCCEEDED) || is_true(conditions, CONDITION_FAILED);
}

}  // namespace qsync::api
