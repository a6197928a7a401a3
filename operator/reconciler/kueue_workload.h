// File: operator/reconciler/kueue_workload.h
// Kueue admission for a HybridTrainingJob labelled kueue.x-k8s.io/queue-name: the operator is
// the job's Kueue integration (what Kueue's jobframework does for a Go controller; Kueue runs no
// controller for an external CRD). Pure functions of the job and the objects read from the API:
// the Workload the job owns (one pod set per pool entry: its count and what each pod requests,
// its node selector and tolerations for Kueue's flavor matching), how Kueue's status reads
// (admitted, evicted, finished, the flavor of each pod set), the job spec on admission (each
// assigned ResourceFlavor's nodeLabels and tolerations merged into its entry's podTemplate, the
// entry's own values kept in an annotation) and on eviction (those values put back), and the
// Workload status writes that are the job controller's: PodsReady, Finished, and the quota
// released once an evicted job's pods are gone. The reconcile steps are in job_kueue_pass.cpp.
//
//   const json wl = desired_kueue_workload(job_object, job, gpu_tolerations);
//   const KueueState s = kueue_state(live_workload);
//   if (s.admitted) { json spec = job_object["spec"]; admitted_job_spec(spec, infos); }
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "operator/api/hybrid_training_job.h"
#include "operator/kube/resource.h"

namespace qsync::reconciler {

// kueue.x-k8s.io/v1beta2 (Kueue >= 0.15 stores it; the fields used here are the same in v1beta1).
const kube::ResourceType& kueue_workloads_type();        // namespaced
const kube::ResourceType& kueue_resource_flavors_type(); // cluster-scoped
inline constexpr const char* KUEUE_JOB_UID_LABEL = "kueue.x-k8s.io/job-uid";
// On the job while Kueue's flavors are merged into its entries: each entry's own podTemplate
// nodeSelector and tolerations ({"train": {"nodeSelector": {...}, "tolerations": [...]}}).
inline constexpr const char* KUEUE_ORIGINAL_TEMPLATES_ANNOTATION = "qsync.dev/kueue-original-pod-templates";
inline constexpr size_t KUEUE_MAX_POD_SETS = 18;  // Kueue's limit on a Workload's pod sets

// "hybridtrainingjob-<job>-<5 hex digits of a hash of the job's name and uid>", Kueue's shape.
std::string kueue_workload_name(const std::string& job, const std::string& uid);

// The Workload the queued job owns: spec.queueName from the label, spec.podSets one per pool
// entry (training first, in order). Throws std::invalid_argument naming the entry when an entry
// name is not a DNS label or there are more than KUEUE_MAX_POD_SETS entries.
nlohmann::json desired_kueue_workload(const nlohmann::json& job_object, const api::HybridTrainingJob& job,
                                      const nlohmann::json& gpu_tolerations);

// Whether `live`'s queue and pod sets (names, counts, requests, in order) are `desired`'s; node
// selectors and tolerations are not compared (an admitted job's carry the flavor's).
bool kueue_workload_equivalent(const nlohmann::json& live, const nlohmann::json& desired);

// What Kueue's status says of a Workload.
struct KueueState {
  bool quota_reserved = false;  // QuotaReserved=True
  bool admitted = false;        // Admitted=True with status.admission, not evicted or finished
  bool evicted = false;         // Evicted=True (preempted, deactivated, a stopped queue, ...)
  bool finished = false;        // Finished=True
  bool has_admission = false;   // status.admission is set
  std::string evicted_reason, evicted_message;
  std::string cluster_queue;
  std::map<std::string, std::set<std::string>> flavors;  // pod set -> its assigned flavors
};
KueueState kueue_state(const nlohmann::json& workload);

// What an admission adds to one pod set's pods: the union of its flavors' spec.nodeLabels and
// spec.tolerations.
struct PodSetInfo {
  std::map<std::string, std::string> node_selector;
  nlohmann::json tolerations = nlohmann::json::array();
};
// Adds a ResourceFlavor's (the object read from the API) labels and tolerations to `info`; a
// label another flavor of the same pod set set to another value is an error (returned).
std::optional<std::string> add_flavor(PodSetInfo& info, const nlohmann::json& flavor);

// The job's `job_object` with each entry's podTemplate given its pod set's info and the entry's
// own values kept in KUEUE_ORIGINAL_TEMPLATES_ANNOTATION (when not kept already), and
// spec.runPolicy.suspend false. A label the entry's podTemplate already sets to another value is
// an error (returned; the object is then not changed).
std::optional<std::string> admitted_job(nlohmann::json& job_object, const std::map<std::string, PodSetInfo>& infos);
// The job's `job_object` with the entries' own podTemplate values back (the annotation
// removed) and spec.runPolicy.suspend true.
void evicted_job(nlohmann::json& job_object);

// Sets condition `type` in a Workload's status.conditions (Kueue's metav1.Condition shape),
// keeping lastTransitionTime when the status does not change.
void set_kueue_condition(nlohmann::json& workload, const std::string& type, bool status, const std::string& reason,
                         const std::string& message, const std::string& now);
// The PodsReady condition Kueue's waitForPodsReady waits for (the job controller writes it):
// True "Started" once `ready` of `want` pods run (want > 0), "Recovered" when they run again
// after a loss; False "WaitForStart" before, "WaitForRecovery" after a loss. nullopt when the
// Workload already says so (nothing to write).
std::optional<nlohmann::json> pods_ready_workload(const nlohmann::json& workload, int64_t ready, int64_t want,
                                                  const std::string& now);
// The Workload with Finished=True (reason Succeeded or Failed, or FailedToStart).
nlohmann::json finished_workload(nlohmann::json workload, const std::string& reason, const std::string& message,
                                 const std::string& now);
// An evicted Workload whose pods are gone, its quota released: status.admission removed,
// QuotaReserved=False (PendingEvaluation), Admitted=False (NoReservation), Requeued=True for a
// preemption or node failure (Kueue requeues it), else False.
nlohmann::json released_workload(nlohmann::json workload, const std::string& now);

}  // namespace qsync::reconciler
