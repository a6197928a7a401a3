// File: operator/reconciler/job_controller_setup.cpp
// The job controller's informers, watches and metrics on a Manager (see job_controller_setup.h).
#include "operator/reconciler/job_controller_setup.h"

#include <prometheus/registry.h>

#include "kernels/thread_stack_allowance.h"
#include "operator/api/conditions.h"
#include "operator/api/group_version.h"

namespace qsync::reconciler {
namespace {

using nlohmann::json;

// Jobs whose Planned condition is not True and that are not finished: a Node change may let them plan.
std::vector<std::string> unplanned_job_keys(controller::Informer& jobs) {
  std::vector<std::string> keys;
  for (const json& j : jobs.list()) {
    bool planned = false, finished = false;
    if (j.contains("status") && j["status"].contains("conditions")) {
      for (const json& c : j["status"]["conditions"]) {
        const std::string type = c.value("type", ""), status = c.value("status", "");
        if (type == api::CONDITION_PLANNED && status == api::CONDITION_TRUE) planned = true;
        if ((type == api::CONDITION_SUCCEEDED || type == api::CONDITION_FAILED) && status == api::CONDITION_TRUE)
          finished = true;
      }
    }
    if (!planned && !finished) keys.push_back(controller::key_of(j));
  }
  return keys;
}

}  // namespace

JobControllerParts add_job_controller(controller::Manager& manager, kube::KubeClient& client,
                                      const JobControllerOptions& options) {
  thread_stack_allowance_link();  // the manager serves metrics in a process carrying the CUDA libraries
  JobControllerParts parts;
  controller::Informer& jobs = manager.informer_for(hybrid_training_jobs_type(), options.namespace_);
  const ClusterInformers informers{.pods = &manager.informer_for(kube::pods_type(), options.namespace_),
                                   .services = &manager.informer_for(kube::services_type(), options.namespace_),
                                   .config_maps = &manager.informer_for(kube::config_maps_type(), options.namespace_),
                                   .nodes = &manager.informer_for(kube::nodes_type())};
  parts.reader = std::make_unique<InformerClusterReader>(client, informers);
  parts.events = std::make_unique<kube::EventRecorder>(client, "qsync-operator");
  parts.metrics = std::make_unique<JobMetrics>(*manager.metrics().registry());
  parts.reported_checkpoints = std::make_unique<ReportedCheckpoints>();
  ReconcilerOptions reconciler_options = options.reconciler;
  reconciler_options.reported_checkpoints = parts.reported_checkpoints.get();
  parts.reconciler = std::make_unique<JobReconciler>(client, *parts.reader, parts.events.get(), parts.metrics.get(),
                                                     std::move(reconciler_options));

  controller::ControllerOptions controller_options;
  controller_options.name = "hybridtrainingjob";
  controller_options.max_concurrent_reconciles = options.workers;
  JobReconciler* reconciler = parts.reconciler.get();
  // Before the controller's own pod handler: a deleted pod's last reported checkpoint is recorded
  // before its deletion queues the job (handlers run in the order they were added).
  ReportedCheckpoints* reported = parts.reported_checkpoints.get();
  informers.pods->add_handler({.on_add = [reported](const json& pod) { reported->observe(pod); },
                               .on_update = [reported](const json&, const json& pod) { reported->observe(pod); },
                               .on_delete = [reported](const json& pod) { reported->observe(pod); }});
  controller::Controller& c = manager.add_controller(
      std::move(controller_options), [reconciler](const std::string& key) { return reconciler->reconcile(key); });
  c.watch_for(jobs, {controller::generation_changed_predicate()});
  for (controller::Informer* owned : {informers.pods, informers.services, informers.config_maps})
    c.watch_owned(*owned, api::API_VERSION, api::KIND);
  c.watch_mapped(*informers.nodes, [&jobs](const json&) { return unplanned_job_keys(jobs); });
  JobMetrics* metrics = parts.metrics.get();
  auto update_phases = [&jobs, metrics] { metrics->set_jobs_by_phase(jobs.list()); };
  jobs.add_handler({.on_add = [update_phases](const json&) { update_phases(); },
                    .on_update = [update_phases](const json&, const json&) { update_phases(); },
                    .on_delete = [update_phases, reported](const json& job) {
                      update_phases();
                      reported->forget(job["metadata"].value("uid", ""));
                    }});
  parts.controller = &c;
  return parts;
}

}  // namespace qsync::reconciler
