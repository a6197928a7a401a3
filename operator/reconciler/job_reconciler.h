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
//   ApiClusterReader reader(client);
//   JobReconciler r(client, reader, &events, &metrics, {});
//   controller.add(... [&](const std::string& key) { return r.reconcile(key); });
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "operator/controller/controller.h"
#include "operator/kube/events.h"
#include "operator/kube/kube_client.h"
#include "operator/reconciler/checkpoint_report.h"
#include "operator/reconciler/cluster_reader.h"
#include "operator/reconciler/desired_children.h"
#include "operator/reconciler/job_metrics.h"

namespace qsync::reconciler {

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
};

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
  controller::ReconcileResult finish(Pass& p);
  controller::ReconcileResult run_active(Pass& p);
  controller::ReconcileResult suspend(Pass& p);
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
};

}  // namespace qsync::reconciler
