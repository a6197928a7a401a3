// File: operator/reconciler/job_pod_group_pass.cpp
// The reconcile pass's gang-scheduling step (see job_reconciler.h and pod_group.h): before any
// pod of a gang-scheduled job is created, its PodGroup exists with minMember = the plan's world
// size; a re-plan to another size updates it in place (the old size's pods are gone before the
// new ones start, job_reconciler.cpp); a job that stops asking for a gang has its PodGroup
// deleted. Level-triggered: the PodGroup is read from the API each pass of a job that needs one
// (no informer, so a cluster without the PodGroup CRD costs nothing unless a job asks for it).
#include "operator/reconciler/job_reconcile_pass.h"
#include "operator/reconciler/pod_group.h"

namespace qsync::reconciler {

using json = nlohmann::json;
using namespace pass;

namespace {

std::string not_installed(const GangScheduler& gang) {
  return std::string("the PodGroup resource (") + gang.api_version + " " + gang.plural +
         ") is not installed: install the " + gang.name + " scheduler (kubernetes-sigs/scheduler-plugins with its "
         "Coscheduling plugin and CRDs), or remove spec.runPolicy.schedulingPolicy";
}

// `live` with `desired`'s spec fields (status, other fields and metadata kept).
json updated_pod_group(json live, const json& desired) {
  for (const auto& [key, value] : desired["spec"].items()) live["spec"][key] = value;
  if (!desired["spec"].contains("scheduleTimeoutSeconds") && live["spec"].contains("scheduleTimeoutSeconds"))
    live["spec"].erase("scheduleTimeoutSeconds");
  live["metadata"]["ownerReferences"] = desired["metadata"]["ownerReferences"];
  return live;
}

}  // namespace

bool JobReconciler::ensure_pod_group(Pass& p, int64_t world, std::vector<std::string>& errors) {
  const GangScheduler* gang = job_gang_scheduler(p.job);
  if (gang == nullptr) {
    remove_pod_groups(p);
    return true;
  }
  const std::string name = pod_group_name(p.name);
  const kube::ResourceType type = pod_group_type(*gang);
  const json desired = desired_pod_group(p.object, p.job, world);
  try {
    const std::optional<json> live = client_.get_if_exists(type, p.ns, name);
    if (!live) {
      client_.create(type, p.ns, desired);
      record(p, "Normal", "CreatedPodGroup",
             "created PodGroup " + name + " (" + gang->name + ", minMember " + std::to_string(world) + ")");
      return true;
    }
    if (!owned_by(*live, p.uid)) {
      errors.push_back("pod group " + name + ": a PodGroup of that name exists and is not this job's; delete it or "
                       "rename the job");
      return false;
    }
    if (!pod_group_matches(*live, desired)) {
      client_.update(type, updated_pod_group(*live, desired));
      record(p, "Normal", "UpdatedPodGroup", "PodGroup " + name + " now has minMember " + std::to_string(world));
    }
    return true;
  } catch (const kube::KubeError& e) {
    if (kube::is_conflict(e) || kube::is_already_exists(e)) throw;  // a stale read: requeue with backoff
    errors.push_back("pod group " + name + ": " + (kube::is_not_found(e) ? not_installed(*gang) : e.api_message()));
    record(p, "Warning", "FailedCreatePodGroup", errors.back());
    return false;
  }
}

void JobReconciler::remove_pod_groups(Pass& p) {
  // A PodGroup is left only where a pod still says it was in one (the gang was switched off).
  for (const GangScheduler& gang : gang_schedulers()) {
    bool labelled = false;
    for (const json& pod : p.pods) labelled = labelled || !label(pod, gang.pod_group_label).empty();
    if (!labelled) continue;
    const kube::ResourceType type = pod_group_type(gang);
    try {
      const std::optional<json> live = client_.get_if_exists(type, p.ns, pod_group_name(p.name));
      if (!live || !owned_by(*live, p.uid) || terminating(*live)) continue;
      client_.remove(type, p.ns, pod_group_name(p.name), kube::PropagationPolicy::BACKGROUND);
      record(p, "Normal", "DeletedPodGroup",
             "deleted PodGroup " + pod_group_name(p.name) + ": spec.runPolicy.schedulingPolicy asks for no gang");
    } catch (const kube::KubeError& e) {
      if (!kube::is_not_found(e)) throw;
    }
  }
}

}  // namespace qsync::reconciler
