// File: operator/reconciler/job_controller_setup.h
// Wires the HybridTrainingJob reconciler into a Manager, as qsync-operator runs it: informers
// for HybridTrainingJobs, Pods, Services, ConfigMaps, Deployments and StatefulSets (one
// namespace, or all) and Nodes; the controller watching jobs (generation changes only: its own
// status writes do not requeue), owned Pods, Services and ConfigMaps (to the owner's key), Nodes
// (a change requeues every job not yet planned), and Deployments/StatefulSets (to the jobs that
// borrow from them); the job metrics in the manager's registry, with the jobs-by-phase gauge
// kept from the jobs' cache; the checkpoint steps reported by pods (checkpoint_report.h) recorded
// from the pod informer before the controller sees the pod event.
//
//   JobControllerParts parts = add_job_controller(manager, client, {.namespace_ = "", .workers = 4, ...});
//   manager.run();  // parts must outlive it
#pragma once

#include <memory>
#include <string>

#include "operator/controller/manager.h"
#include "operator/reconciler/job_reconciler.h"

namespace qsync::reconciler {

struct JobControllerOptions {
  std::string namespace_;  // "": every namespace
  int workers = 4;
  ReconcilerOptions reconciler;
};

struct JobControllerParts {
  std::unique_ptr<ReportedCheckpoints> reported_checkpoints;  // fed by the pod informer
  std::unique_ptr<InformerClusterReader> reader;
  std::unique_ptr<kube::EventRecorder> events;
  std::unique_ptr<JobMetrics> metrics;
  std::unique_ptr<JobReconciler> reconciler;
  controller::Controller* controller = nullptr;
};

// Add before manager.run().
JobControllerParts add_job_controller(controller::Manager& manager, kube::KubeClient& client,
                                      const JobControllerOptions& options);

}  // namespace qsync::reconciler
