// File: planner/job_scheduling_policy.cpp
// spec.runPolicy.schedulingPolicy: the gang scheduler table, its field rows and JSON form (see
// job_scheduling_policy.h).
#include "planner/job_scheduling_policy.h"

#include <stdexcept>

#include "planner/job_fields.h"
#include "planner/json_access.h"

namespace qsync {

const std::vector<GangScheduler>& gang_schedulers() {
  static const std::vector<GangScheduler> table = {
      {"coscheduling", "scheduling.x-k8s.io/v1alpha1", "podgroups", "scheduling.x-k8s.io/pod-group",
       "scheduler-plugins-scheduler"},
  };
  return table;
}

const GangScheduler& gang_scheduler(const std::string& name) {
  std::string known;
  for (const GangScheduler& g : gang_schedulers()) {
    if (name == g.name) return g;
    known += (known.empty() ? "" : ", ") + std::string(g.name);
  }
  throw std::invalid_argument("spec.runPolicy.schedulingPolicy.gang: \"" + name + "\" is not a gang scheduler (known: " +
                              known + ")");
}

void add_scheduling_policy_fields(std::vector<Field>& fields) {
  std::vector<std::string> names;
  for (const GangScheduler& g : gang_schedulers()) names.push_back(g.name);
  fields.push_back(Field::object("spec.runPolicy.schedulingPolicy",
                                 "Gang scheduling: the operator creates a PodGroup (minMember = the plan's ranks) "
                                 "before the pods, so the scheduler binds all ranks together or none."));
  fields.push_back(Field::string("spec.runPolicy.schedulingPolicy.gang",
                                 "The gang scheduler: coscheduling (scheduler-plugins' Coscheduling plugin, PodGroup "
                                 "scheduling.x-k8s.io/v1alpha1; pods get the operator's --gang-scheduler-name, default "
                                 "scheduler-plugins-scheduler, unless the podTemplate names a scheduler).")
                       .mandatory()
                       .one_of(names));
  fields.push_back(Field::integer("spec.runPolicy.schedulingPolicy.scheduleTimeoutSeconds",
                                  "How long the scheduler keeps some ranks bound while it waits for the rest (the "
                                  "PodGroup's scheduleTimeoutSeconds; default: the scheduler's).")
                       .at_least(1));
}

void check_scheduling_policy_rules(const nlohmann::json& spec, std::vector<std::string>& problems) {
  const nlohmann::json::json_pointer at("/runPolicy/schedulingPolicy/gang");
  if (!spec.contains(at)) return;
  const GangScheduler& gang = gang_scheduler(spec[at].get<std::string>());
  auto check = [&](const nlohmann::json& holder, const std::string& where) {
    const nlohmann::json labels = holder.value("podTemplate", nlohmann::json::object()).value("labels", nlohmann::json::object());
    if (labels.contains(gang.pod_group_label))
      problems.push_back(where + ".podTemplate.labels: \"" + gang.pod_group_label + "\" names the job's PodGroup, which the "
                         "operator sets under spec.runPolicy.schedulingPolicy; remove the label");
  };
  check(spec, "spec");
  const nlohmann::json pool = spec.value("pool", nlohmann::json::object());
  for (const char* group : {"training", "inference"}) {
    const nlohmann::json entries = pool.value(group, nlohmann::json::array());
    for (size_t i = 0; i < entries.size(); ++i)
      check(entries[i], std::string("spec.pool.") + group + "[" + std::to_string(i) + "]");
  }
}

SchedulingPolicy scheduling_policy_from(const nlohmann::json& policy) {
  SchedulingPolicy s;
  s.gang = json_text(policy, "gang");
  if (policy.contains("scheduleTimeoutSeconds")) s.schedule_timeout_seconds = json_integer(policy, "scheduleTimeoutSeconds");
  return s;
}

nlohmann::json to_json(const SchedulingPolicy& policy) {
  nlohmann::json out = {{"gang", policy.gang}};
  if (policy.schedule_timeout_seconds) out["scheduleTimeoutSeconds"] = *policy.schedule_timeout_seconds;
  return out;
}

}  // namespace qsync
