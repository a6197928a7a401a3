// File: planner/job_scheduling_policy.h
// spec.runPolicy.schedulingPolicy: gang scheduling, all ranks bound together or none (a data-
// parallel job whose ranks start one by one holds GPUs while it waits for the rest). One table of
// the gang schedulers the operator knows: what PodGroup object each takes, the pod label that
// puts a pod in the group, and the scheduler name its pods get when the job's podTemplate names
// none. The field table (job_fields.cpp) takes the names from here; the operator builds the
// PodGroup from the row (operator/reconciler/pod_group.h).
//
//   runPolicy:
//     schedulingPolicy: {gang: coscheduling, scheduleTimeoutSeconds: 300}
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace qsync {

struct Field;

struct SchedulingPolicy {
  std::string gang;  // gang_schedulers()[i].name
  std::optional<int64_t> schedule_timeout_seconds;  // absent: the scheduler's own default
  bool operator==(const SchedulingPolicy&) const = default;
};

struct GangScheduler {
  const char* name;             // spec.runPolicy.schedulingPolicy.gang
  const char* api_version;      // the PodGroup's apiVersion, "GROUP/VERSION"
  const char* plural;           // its resource ("podgroups")
  const char* pod_group_label;  // the pod label whose value names the PodGroup
  const char* scheduler_name;   // the pods' schedulerName unless the podTemplate sets one
};

// coscheduling: kubernetes-sigs/scheduler-plugins' Coscheduling plugin (PodGroup
// scheduling.x-k8s.io/v1alpha1, label scheduling.x-k8s.io/pod-group, the second scheduler its
// chart installs: scheduler-plugins-scheduler).
const std::vector<GangScheduler>& gang_schedulers();
// The row of `name`; throws std::invalid_argument listing the known names.
const GangScheduler& gang_scheduler(const std::string& name);

// The rows under spec.runPolicy.schedulingPolicy.
void add_scheduling_policy_fields(std::vector<Field>& fields);

// A podTemplate (the job's or an entry's) that sets the gang's pod-group label itself: the
// operator names the group. `spec` is the defaulted, field-checked spec.
void check_scheduling_policy_rules(const nlohmann::json& spec, std::vector<std::string>& problems);

// Reads a validated spec.runPolicy.schedulingPolicy.
SchedulingPolicy scheduling_policy_from(const nlohmann::json& policy);
nlohmann::json to_json(const SchedulingPolicy& policy);

}  // namespace qsync
