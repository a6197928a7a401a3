// File: operator/reconciler/pod_group.cpp
// The PodGroup of a gang-scheduled job (see pod_group.h).
#include "operator/reconciler/pod_group.h"

#include <stdexcept>

#include "operator/controller/owner_refs.h"
#include "operator/reconciler/desired_children.h"

namespace qsync::reconciler {

using json = nlohmann::json;

const GangScheduler* job_gang_scheduler(const api::HybridTrainingJob& job) {
  const std::optional<SchedulingPolicy>& policy = job.spec.run_policy.scheduling_policy;
  if (!policy || policy->gang.empty()) return nullptr;
  return &gang_scheduler(policy->gang);
}

kube::ResourceType pod_group_type(const GangScheduler& gang) {
  const std::string api_version = gang.api_version;
  const size_t slash = api_version.find('/');
  return {api_version.substr(0, slash), api_version.substr(slash + 1), gang.plural, "PodGroup", true};
}

std::string pod_group_name(const std::string& job) { return job; }

json desired_pod_group(const json& job_object, const api::HybridTrainingJob& job, int64_t world_size) {
  const GangScheduler* gang = job_gang_scheduler(job);
  if (gang == nullptr) throw std::logic_error("desired_pod_group: job " + job.name() + " asks for no gang scheduling");
  json spec = {{"minMember", world_size}};
  if (const std::optional<int64_t> timeout = job.spec.run_policy.scheduling_policy->schedule_timeout_seconds)
    spec["scheduleTimeoutSeconds"] = *timeout;
  json group = {{"apiVersion", gang->api_version},
                {"kind", "PodGroup"},
                {"metadata",
                 {{"name", pod_group_name(job.name())},
                  {"namespace", job.namespace_name()},
                  {"labels", {{JOB_LABEL, job.name()}}}}},
                {"spec", spec}};
  controller::set_controller_reference(group, job_object);
  return group;
}

bool pod_group_matches(const json& live, const json& desired) {
  const json live_refs = live["metadata"].value("ownerReferences", json::array());
  const json want_refs = desired["metadata"].value("ownerReferences", json::array());
  bool owned = false;
  for (const json& ref : live_refs)
    for (const json& want : want_refs) owned = owned || ref.value("uid", "") == want.value("uid", "");
  const json spec = live.value("spec", json::object());
  for (const auto& [key, value] : desired["spec"].items())
    if (spec.value(key, json()) != value) return false;
  // A timeout the job no longer sets is removed.
  if (spec.contains("scheduleTimeoutSeconds") && !desired["spec"].contains("scheduleTimeoutSeconds")) return false;
  return owned;
}

}  // namespace qsync::reconciler
