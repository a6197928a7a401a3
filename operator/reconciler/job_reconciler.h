// File: operator/reconciler/job_reconciler.h
// The HybridTrainingJob reconciler, level-triggered and idempotent, in controller-runtime's
// order: fetch (gone: done) -> finished (Succeeded/Failed True): clean up pods per
// cleanPodPolicy, honour ttlSecondsAfterFinished, keep the status -> managedBy another
// controller: skip -> suspend: stop the pods (they checkpoint on SIGTERM), Suspended=True ->
// activeDeadlineSeconds exceeded: Failed -> plan when the generation or the attempt changed (the
// plan ConfigMap's annotations say which it holds) -> ensure the Service, the plan ConfigMap and
// one Pod per rank of the current attempt (status.restarts), deleting pods of older attempts ->
// derive: all ranks Succeeded: Succeeded; a rank Failed (or its pod vanished): a whole-job
// restart while restarts < backoffLimit, else Failed; all Running: Running -> write status only
// when it changed. status.lastCheckpointStep: the highest checkpointStep the workers' termination
// messages report (checkpoint_report.h), never lowered. Child-creation failures set
// Created=False with the API's message, plus a Warning Event. It never branches on which event
// queued the key.
//
// Elastic jobs (spec.elasticPolicy, or an inference entry that borrows; docs/borrowing.md):
// before planning, the lending pass (job_lending_pass.cpp) decides each borrowed workload's
// replicas from the clock, the demand and its pods, remembers it in status.lending and scales
// the workload; the elastic pass (job_elastic_pass.cpp) compares the pool offered now with the
// current plan's placement and waits (below minRanks: Phase Waiting), re-plans, or resizes (a
// new attempt: status.resizes + 1, the old pods checkpoint on SIGTERM, the new plan's pods
// resume from that checkpoint).
//
// Kueue (a job labelled kueue.x-k8s.io/queue-name): after the managedBy check and before the
// suspend step, the job's Workload is ensured and decides spec.runPolicy.suspend (admitted:
// false, with the flavors' node selectors; otherwise true); a finished job's Workload is marked
// Finished (job_kueue_pass.cpp).
//
// Gang scheduling (spec.runPolicy.schedulingPolicy): the PodGroup (pod_group.h) is ensured
// after the Service and before the pods; no pod is created while it cannot be. A job that borrows carries the finalizer
// qsync.dev/return-borrowed: finishing, suspending or deleting it gives the workloads their
// serving replicas back first.
//
//   ApiClusterReader reader(client);
//   JobReconciler r(client, reader, &events, &metrics, {});
//   controller.add(... [&](const std::string& key) { return r.reconcile(key); });
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "operator/controller/controller.h"
#include "operator/kube/events.h"
#include "operator/kube/kube_client.h"
#include "operator/lending/demand_source.h"
#include "operator/reconciler/checkpoint_report.h"
#include "operator/reconciler/cluster_reader.h"
#include "operator/reconciler/desired_children.h"
#include "operator/reconciler/job_borrowing.h"
#include "operator/reconciler/job_metrics.h"
#include "operator/reconciler/job_planning.h"

namespace qsync::reconciler {

struct KueueState;  // kueue_workload.h

struct ReconcilerOptions {
  ChildOptions children;
  // Requeue while pods are pending or running (deadlines, vanished pods).
  std::chrono::milliseconds active_requeue = std::chrono::seconds(5);
  // Requeue while planning waits for the cluster (a profile ConfigMap, a node label).
  std::chrono::milliseconds waiting_requeue = std::chrono::seconds(15);
  // Seconds since the epoch; null: the system clock (tests move time for TTLs and deadlines).
  std::function<double()> now_seconds;
  // Steps reported by pods already gone (fed by the pod informer); null: only the live pods count.
  ReportedCheckpoints* reported_checkpoints = nullptr;
  // Where borrowing entries' demand samples come from; null: Prometheus over HTTP.
  lending::DemandSource* demand_source = nullptr;
  // The Prometheus a borrowing entry queries when it names none (--prometheus-url).
  std::string prometheus_url;
};

inline constexpr const char* RETURN_BORROWED_FINALIZER = "qsync.dev/return-borrowed";

class JobReconciler {
 public:
  // `events` and `metrics` may be null.
  JobReconciler(kube::KubeClient& client, ClusterReader& reader, kube::EventRecorder* events, JobMetrics* metrics,
                ReconcilerOptions options = {});

  // For controller::Controller. Throws kube::KubeError on API failures (the controller requeues
  // with backoff), e.g. a Conflict when the job changed since it was read.
  controller::ReconcileResult reconcile(const std::string& key);

 private:
  struct Pass;
  // What the elastic pass hands to planning.
  struct ElasticStep {
    JobPlan plan;                          // the current attempt's plan (from its ConfigMap)
    bool planned = false;                  // plan holds it; false: plan now
    PoolCapacity capacity;                 // what pool discovery places
    std::optional<JobPlan> plan_for_offer; // a growth's plan, reused for the new attempt
    std::string note;                      // why the pool is as it is
  };
  controller::ReconcileResult finish(Pass& p);
  controller::ReconcileResult finalize(const nlohmann::json& object);
  controller::ReconcileResult planning_failed(Pass& p, const PlanningError& e);
  std::optional<controller::ReconcileResult> elastic_pool(Pass& p, ElasticStep& step);
  // The elastic pass's pieces (job_elastic_pass.cpp): a resize counted in status and metrics;
  // below minRanks, the pods stopped and the job Waiting; a growth planned (once per offer) and
  // taken only if the planner predicts it pays for its restart.
  void count_resize(Pass& p, const lending::ResizeDecision& d);
  controller::ReconcileResult wait_for_ranks(Pass& p, const lending::ResizeDecision& d, bool has_pods);
  bool growth_pays_off(Pass& p, ElasticStep& step, const lending::ResizeDecision& d, const std::string& offer_key);
  PoolCapacity lend(Pass& p);
  // The events of one entry's lending decision (a scale-in, a reclaim begun or finished); a
  // finished reclaim also counts in `l` and the operator's metrics.
  void record_lending_events(Pass& p, const BorrowSource& s, int64_t replicas, const lending::LendingDecision& d,
                             api::LendingStatus& l);
  void return_borrowed(Pass& p, const std::string& why);
  std::optional<nlohmann::json> find_workload(const std::string& ns, const BorrowSource& s, std::string& problem);
  lending::DemandSource& demand_source();
  controller::ReconcileResult run_active(Pass& p);
  // Gang scheduling (job_pod_group_pass.cpp): the PodGroup with `world` members exists before
  // any pod; false (and why in errors) when it could not be made. No gang: a PodGroup left by
  // an earlier generation is deleted.
  bool ensure_pod_group(Pass& p, int64_t world, std::vector<std::string>& errors);
  void remove_pod_groups(Pass& p);
  // The worker pods (job_pods_pass.cpp): the Service and one Pod per rank of `attempt`, then the
  // job's state from its pods.
  struct PodCensus;
  controller::ReconcileResult run_pods(Pass& p, const JobPlan& plan, int64_t attempt, const std::string& note);
  PodCensus census_pods(Pass& p, int64_t world, int64_t attempt);
  void create_missing_pods(Pass& p, const JobPlan& plan, int64_t attempt, bool group_ready, PodCensus& c,
                           std::vector<std::string>& errors);
  controller::ReconcileResult settle_from_pods(Pass& p, int64_t world, const PodCensus& c, const std::string& note);
  controller::ReconcileResult restart_or_fail(Pass& p, int64_t world, const std::string& what);
  // status.borrowedDevices and status.lending[].borrowedDevices from the plan's placement.
  void note_borrowed(Pass& p, const JobPlan& plan);
  // Stops the pods, Suspended=True; `why` replaces the message of a suspend the spec asked for.
  controller::ReconcileResult suspend(Pass& p, const std::string& why = "");
  // Kueue (job_kueue_pass.cpp, kueue_workload.h): a queued job's Workload, and the job started
  // on admission and stopped on eviction. nullopt: admitted and running, the pass goes on.
  std::optional<controller::ReconcileResult> queue_in_kueue(Pass& p);
  controller::ReconcileResult start_admitted(Pass& p, const nlohmann::json& workload, const KueueState& s);
  controller::ReconcileResult stop_for_kueue(Pass& p, const std::string& why);
  controller::ReconcileResult fail_admission(Pass& p, const nlohmann::json& workload, const std::string& why);
  void report_pods_ready(Pass& p, const nlohmann::json& workload);  // PodsReady, written on a change
  void finish_kueue_workload(Pass& p);  // a finished job: its Workload Finished
  void leave_kueue(Pass& p);            // the queue label removed: its Workload deleted
  void write_status(Pass& p);
  void mark_finished(Pass& p, const char* type, const std::string& reason, const std::string& message);
  void record(Pass& p, const std::string& type, const std::string& reason, const std::string& message);
  void delete_quietly(const kube::ResourceType& type, const std::string& ns, const std::string& name);
  double now() const;

  kube::KubeClient& client_;
  ClusterReader& reader_;
  kube::EventRecorder* events_;
  JobMetrics* metrics_;
  ReconcilerOptions options_;
  std::unique_ptr<lending::DemandSource> own_demand_source_;
  std::mutex growth_mu_;
  std::map<std::string, std::pair<std::string, double>> growth_checks_;  // job uid -> {offered slots, predicted step}
};

}  // namespace qsync::reconciler
