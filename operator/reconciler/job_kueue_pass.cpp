// File: operator/reconciler/job_kueue_pass.cpp
// The reconcile pass's Kueue steps (see kueue_workload.h), in the order of Kueue's jobframework
// reconciler: a queued job owns one Workload (created once the job is suspended and its pods are
// gone; its pod sets rewritten while no quota is reserved, replaced when they change after); the
// job runs only while the Workload is admitted: on admission its entries get the assigned
// flavors' node labels and tolerations and spec.runPolicy.suspend false (one update), on
// eviction or a lost admission their own values back and suspend true; an evicted Workload's
// quota is released once the job's pods are gone; while admitted the Workload's PodsReady follows
// the pods (Kueue's waitForPodsReady evicts a job that never reports it); a finished job marks
// its Workload Finished.
// Level-triggered: the Workload is read from the API each pass (no informer: Kueue's CRDs may be
// absent), and a job waiting for admission is requeued after ReconcilerOptions::waiting_requeue.
#include "operator/reconciler/job_reconcile_pass.h"
#include "operator/reconciler/kueue_workload.h"
#include "operator/reconciler/worker_pod_settings.h"

namespace qsync::reconciler {

using json = nlohmann::json;
using controller::ReconcileResult;
using namespace pass;

namespace {

const char* NOT_INSTALLED =
    "the Workload resource (kueue.x-k8s.io/v1beta2 workloads) is not installed: install Kueue (v0.15 or later) with "
    "HybridTrainingJob.v1alpha1.qsync.dev in its integrations.externalFrameworks, or remove the "
    "kueue.x-k8s.io/queue-name label";

ReconcileResult again() {
  ReconcileResult r;
  r.requeue = true;
  return r;
}

bool has_kept_templates(const json& job_object) {
  const json annotations = job_object["metadata"].value("annotations", json::object());
  return annotations.contains(KUEUE_ORIGINAL_TEMPLATES_ANNOTATION);
}

}  // namespace

std::optional<ReconcileResult> JobReconciler::queue_in_kueue(Pass& p) {
  const auto wait = [&](const std::string& why) {  // nothing stays borrowed while the job waits
    if (!p.sources.empty()) return_borrowed(p, "the job waits for Kueue");
    suspend(p, why);
  };
  const kube::ResourceType& type = kueue_workloads_type();
  json desired;
  try {
    desired = desired_kueue_workload(p.object, p.job, options_.children.gpu_tolerations);
  } catch (const std::invalid_argument& e) {
    mark_finished(p, api::CONDITION_FAILED, "InvalidSpec", std::string("invalid spec for Kueue: ") + e.what());
    write_status(p);
    return finish(p);
  }
  const std::string wl = name_of(desired);
  const std::string queue = desired["spec"]["queueName"];
  const bool suspended = p.job.spec.run_policy.suspend;
  std::optional<json> live = client_.get_if_exists(type, p.ns, wl);
  if (live && !owned_by(*live, p.uid)) {
    wait("Workload " + wl + " exists and is not this job's: delete it or rename the job");
    return requeue_after(options_.waiting_requeue);
  }
  if (!live) {
    if (!suspended || has_kept_templates(p.object)) return stop_for_kueue(p, "no Workload admits it yet");
    if (!p.pods.empty()) {  // a stopped run's pods hold resources no quota accounts for yet
      wait("queued in Kueue's LocalQueue " + queue + ": waiting for the stopped pods to go before creating Workload " + wl);
      return requeue_after(options_.active_requeue);
    }
    try {
      live = client_.create(type, p.ns, desired);
    } catch (const kube::KubeError& e) {
      if (!kube::is_not_found(e)) throw;
      record(p, "Warning", "KueueNotInstalled", NOT_INSTALLED);
      wait(NOT_INSTALLED);
      return requeue_after(options_.waiting_requeue);
    }
    record(p, "Normal", "CreatedWorkload", "created Kueue Workload " + wl + " in LocalQueue " + queue);
  } else if (!kueue_workload_equivalent(*live, desired)) {
    const KueueState before = kueue_state(*live);
    if (!before.quota_reserved && !before.has_admission) {
      json updated = *live;
      updated["spec"]["queueName"] = desired["spec"]["queueName"];
      updated["spec"]["podSets"] = desired["spec"]["podSets"];
      live = client_.update(type, updated);
      record(p, "Normal", "UpdatedWorkload", "Workload " + wl + " now asks for the pool's current pod sets");
    } else {  // pod sets Kueue reserved quota for changed: queue the new ones (Kueue's jobframework does the same)
      if (!suspended) return stop_for_kueue(p, "its pool changed after Kueue admitted it");
      client_.remove(type, p.ns, wl, kube::PropagationPolicy::BACKGROUND);
      record(p, "Normal", "DeletedWorkload", "Workload " + wl + " was admitted for another pool: queued again");
      return again();
    }
  }
  const KueueState s = kueue_state(*live);
  if (s.admitted) {
    if (suspended) return start_admitted(p, *live, s);
    report_pods_ready(p, *live);
    return std::nullopt;  // running under its admission
  }
  if (!suspended || has_kept_templates(p.object))
    return stop_for_kueue(p, s.evicted ? "Kueue evicted it (" + s.evicted_reason + ": " + s.evicted_message + ")"
                                       : "its Workload lost Kueue's admission");
  if (s.evicted && s.has_admission && p.pods.empty()) {
    client_.update_status(type, released_workload(*live, p.now));
    record(p, "Normal", "QuotaReleased", "the evicted job's pods are gone: Workload " + wl + " released its quota");
  }
  const std::string why = s.finished ? "Workload " + wl + " is Finished: Kueue will not admit it again"
                          : s.evicted ? "evicted by Kueue (" + s.evicted_reason + "): waiting in LocalQueue " + queue +
                                            " to be admitted again"
                                      : "queued in Kueue's LocalQueue " + queue + " (Workload " + wl + "): waiting for admission";
  wait(why);
  return requeue_after(options_.waiting_requeue);
}

ReconcileResult JobReconciler::start_admitted(Pass& p, const json& workload, const KueueState& s) {
  std::map<std::string, PodSetInfo> infos;
  std::string names;
  for (const auto& [set, flavors] : s.flavors)
    for (const std::string& flavor : flavors) {
      const std::optional<json> f = client_.get_if_exists(kueue_resource_flavors_type(), "", flavor);
      if (!f) {
        suspend(p, "Kueue admitted pod set " + set + " on ResourceFlavor " + flavor + ", which is not found: create it");
        return requeue_after(options_.waiting_requeue);
      }
      if (const std::optional<std::string> conflict = add_flavor(infos[set], *f)) return fail_admission(p, workload, *conflict);
      names += (names.empty() ? "" : ", ") + set + ": " + flavor;
    }
  json updated = p.object;
  if (const std::optional<std::string> conflict = admitted_job(updated, infos)) return fail_admission(p, workload, *conflict);
  p.object = client_.update(hybrid_training_jobs_type(), updated);
  record(p, "Normal", "Admitted", "admitted by Kueue's ClusterQueue " + s.cluster_queue + " (" + names + "): starting");
  return again();
}

ReconcileResult JobReconciler::stop_for_kueue(Pass& p, const std::string& why) {
  json updated = p.object;
  evicted_job(updated);
  p.object = client_.update(hybrid_training_jobs_type(), updated);
  record(p, "Normal", "SuspendedByKueue", "suspended: " + why + "; the pool entries' own node selectors and tolerations are back");
  return again();
}

ReconcileResult JobReconciler::fail_admission(Pass& p, const json& workload, const std::string& why) {
  client_.update_status(kueue_workloads_type(), finished_workload(workload, "FailedToStart", why, p.now));
  mark_finished(p, api::CONDITION_FAILED, "KueueAdmissionConflict", why);
  write_status(p);
  return finish(p);
}

void JobReconciler::report_pods_ready(Pass& p, const json& workload) {
  const int64_t want = p.status.plan ? int64_t(p.status.plan->ranks.size()) : 0;
  int64_t ready = 0;
  for (const json& pod : p.pods)
    if (!terminating(pod) && (pod_phase(pod) == "Running" || pod_phase(pod) == "Succeeded")) ++ready;
  if (const std::optional<json> updated = pods_ready_workload(workload, ready, want, p.now))
    client_.update_status(kueue_workloads_type(), *updated);
}

void JobReconciler::finish_kueue_workload(Pass& p) {
  const std::string wl = kueue_workload_name(p.name, p.uid);
  std::optional<json> live;
  try {
    live = client_.get_if_exists(kueue_workloads_type(), p.ns, wl);
  } catch (const kube::KubeError& e) {
    if (!kube::is_not_found(e)) throw;
  }
  if (!live || !owned_by(*live, p.uid) || kueue_state(*live).finished) return;
  const bool succeeded = api::is_true(p.status.conditions, api::CONDITION_SUCCEEDED);
  client_.update_status(kueue_workloads_type(),
                        finished_workload(*live, succeeded ? "Succeeded" : "Failed", p.status.message, p.now));
  record(p, "Normal", "FinishedWorkload", "Workload " + wl + " is Finished: Kueue releases its quota");
}

void JobReconciler::leave_kueue(Pass& p) {
  const std::string wl = kueue_workload_name(p.name, p.uid);
  const std::optional<json> live = client_.get_if_exists(kueue_workloads_type(), p.ns, wl);
  if (!live || !owned_by(*live, p.uid) || terminating(*live)) return;
  delete_quietly(kueue_workloads_type(), p.ns, wl);
  record(p, "Normal", "DeletedWorkload", "the job left Kueue (no kueue.x-k8s.io/queue-name label): deleted Workload " + wl);
}

}  // namespace qsync::reconciler
