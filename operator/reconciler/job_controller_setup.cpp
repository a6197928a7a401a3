// File: operator/reconciler/job_controller_setup.cpp
// The job controller's informers, watches and metrics on a Manager (see job_controller_setup.h).
#include "operator/reconciler/job_controller_setup.h"

#include <prometheus/registry.h>

#include "kernels/thread_stack_allowance.h"
#include "operator/api/conditions.h"
#include "operator/api/group_version.h"
#include "operator/reconciler/comm_profiles.h"
#include "operator/reconciler/desired_children.h"
#include "operator/reconciler/job_planning.h"

namespace qsync::reconciler {
namespace {

using nlohmann::json;

// Jobs not finished whose Planned condition is not True, or that are elastic: a Node change may
// let them plan, or change their pool.
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
    bool elastic = j.value(json::json_pointer("/spec/elasticPolicy"), json()).is_object();
    for (const json& e : j.value(json::json_pointer("/spec/pool/inference"), json::array()))
      elastic = elastic || (e.is_object() && e.contains("borrow"));
    if ((!planned || elastic) && !finished) keys.push_back(controller::key_of(j));
  }
  return keys;
}

// Jobs in the workload's namespace whose borrowing entries name it (by name, or by labels it
// carries): its replicas and readiness move their lending decisions.
std::vector<std::string> borrowing_job_keys(controller::Informer& jobs, const json& workload) {
  std::vector<std::string> keys;
  const std::string ns = workload["metadata"].value("namespace", ""), name = workload["metadata"].value("name", "");
  const std::string kind = workload.value("kind", "Deployment");
  const json labels = workload["metadata"].value("labels", json::object());
  for (const json& j : jobs.list()) {
    if (j["metadata"].value("namespace", "") != ns) continue;
    for (const json& e : j.value(json::json_pointer("/spec/pool/inference"), json::array())) {
      const json w = e.value(json::json_pointer("/borrow/workload"), json());
      if (!w.is_object() || w.value("kind", std::string("Deployment")) != kind) continue;
      bool match = w.value("name", "") == name;
      if (!match && w.contains("selector") && w["selector"].is_object() && !w["selector"].empty()) {
        match = true;
        for (const auto& [k, v] : w["selector"].items()) match = match && labels.contains(k) && labels[k] == v;
      }
      if (match) {
        keys.push_back(controller::key_of(j));
        break;
      }
    }
  }
  return keys;
}

}  // namespace

JobControllerParts add_job_controller(controller::Manager& manager, kube::KubeClient& client,
                                      const JobControllerOptions& options) {
  thread_stack_allowance_link();  // the manager serves metrics in a process carrying the CUDA libraries
  JobControllerParts parts;
  controller::Informer& jobs = manager.informer_for(hybrid_training_jobs_type(), options.namespace_);
  // Children by the label every one carries; planning's ConfigMap inputs by theirs. Nodes and
  // workloads unfiltered: pool discovery reads every node, and a borrow entry may name any
  // workload (its opt-in is an annotation, which no selector can match).
  const std::string owned = JOB_LABEL;  // "exists"
  const ClusterInformers informers{.pods = &manager.informer_for(kube::pods_type(), options.namespace_, owned),
                                   .services = &manager.informer_for(kube::services_type(), options.namespace_, owned),
                                   .config_maps = &manager.informer_for(kube::config_maps_type(), options.namespace_, owned),
                                   .input_config_maps = {&manager.informer_for(kube::config_maps_type(), options.namespace_, PROFILE_LABEL),
                                                         &manager.informer_for(kube::config_maps_type(), options.namespace_, CALIBRATION_LABEL),
                                                         &manager.informer_for(kube::config_maps_type(), options.namespace_, COMM_PROFILE_LABEL)},
                                   .pods_namespace = options.namespace_,
                                   .nodes = &manager.informer_for(kube::nodes_type()),
                                   .deployments = &manager.informer_for(kube::deployments_type(), options.namespace_),
                                   .stateful_sets = &manager.informer_for(kube::stateful_sets_type(), options.namespace_)};
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
  for (controller::Informer* workloads : {informers.deployments, informers.stateful_sets})
    c.watch_mapped(*workloads, [&jobs](const json& w) { return borrowing_job_keys(jobs, w); });
  JobMetrics* metrics = parts.metrics.get();
  auto update_phases = [&jobs, metrics] { metrics->set_jobs_by_phase(jobs.list()); };
  jobs.add_handler({.on_add = [update_phases](const json&) { update_phases(); },
                    .on_update = [update_phases](const json&, const json&) { update_phases(); },
                    .on_delete = [update_phases, reported, metrics](const json& job) {
                      update_phases();
                      reported->forget(job["metadata"].value("uid", ""));
                      metrics->forget_job(job["metadata"].value("namespace", ""), job["metadata"].value("name", ""));
                    }});
  parts.controller = &c;
  return parts;
}

}  // namespace qsync::reconciler
