// File: operator/reconciler/job_ending.cpp
// How a job's pass ends it (see job_reconciler.h): a terminal condition (mark_finished), the
// finished job's cleanup (cleanPodPolicy, ttlSecondsAfterFinished), suspension (the pods stop
// after checkpointing on SIGTERM), and a deleted job's finalizer; borrowed workloads get their
// serving replicas back in each.
#include <cmath>

#include "operator/controller/finalizers.h"
#include "operator/reconciler/job_reconcile_pass.h"

namespace qsync::reconciler {

using json = nlohmann::json;
using controller::ReconcileResult;
using namespace pass;

void JobReconciler::mark_finished(Pass& p, const char* type, const std::string& reason, const std::string& message) {
  api::set_condition(p.status.conditions, type, api::CONDITION_TRUE, reason, message, p.generation, p.now);
  for (const char* other : {api::CONDITION_RUNNING, api::CONDITION_RESTARTING})
    if (api::find_condition(p.status.conditions, other) != nullptr)
      api::set_condition(p.status.conditions, other, api::CONDITION_FALSE, reason, message, p.generation, p.now);
  p.status.phase = std::string(type) == api::CONDITION_SUCCEEDED ? api::PHASE_SUCCEEDED : api::PHASE_FAILED;
  p.status.message = message;
  if (p.status.completion_time.empty()) p.status.completion_time = p.now;
  record(p, std::string(type) == api::CONDITION_SUCCEEDED ? "Normal" : "Warning", reason, message);
}

ReconcileResult JobReconciler::suspend(Pass& p, const std::string& why) {
  int stopped = 0;
  for (const json& pod : p.pods)
    if (!terminating(pod)) {
      delete_quietly(kube::pods_type(), p.ns, name_of(pod));
      ++stopped;
    }
  const std::string message = !why.empty() ? why
                              : "suspended (spec.runPolicy.suspend): the worker pods were stopped after checkpointing on "
                                "SIGTERM; set suspend to false to resume from the checkpoint";
  const bool newly = !api::is_true(p.status.conditions, api::CONDITION_SUSPENDED);
  api::set_condition(p.status.conditions, api::CONDITION_SUSPENDED, api::CONDITION_TRUE, "Suspended", message,
                     p.generation, p.now);
  for (const char* other : {api::CONDITION_RUNNING, api::CONDITION_RESTARTING, api::CONDITION_CREATED})
    if (api::find_condition(p.status.conditions, other) != nullptr)
      api::set_condition(p.status.conditions, other, api::CONDITION_FALSE, "Suspended", message, p.generation, p.now);
  p.status.phase = api::PHASE_SUSPENDED;
  p.status.message = message;
  p.status.start_time = "";  // activeDeadlineSeconds counts again from the resume, as for batch Jobs
  p.status.replicas = {p.status.plan ? int64_t(p.status.plan->ranks.size()) : 0, 0, 0, 0};
  if (newly) record(p, "Normal", "Suspended", message + " (" + std::to_string(stopped) + " pods stopped)");
  write_status(p);
  return {};
}

ReconcileResult JobReconciler::finalize(const json& object) {
  if (!controller::has_finalizer(object, RETURN_BORROWED_FINALIZER)) return {};
  Pass p;
  p.object = object;
  p.ns = object["metadata"].value("namespace", "");
  p.name = name_of(object);
  p.uid = object["metadata"].value("uid", "");
  p.now = kube::kube_time_format(std::floor(now()));
  try {
    p.job = api::hybrid_training_job_from_json(object);
    p.sources = borrow_sources(p.job.spec);
  } catch (const std::invalid_argument&) {
    p.sources.clear();  // nothing it could have borrowed
  }
  return_borrowed(p, "the job is being deleted");
  if (metrics_ != nullptr) metrics_->forget_job(p.ns, p.name);
  {
    std::lock_guard<std::mutex> lock(growth_mu_);
    growth_checks_.erase(p.uid);
  }
  json next = p.object;
  controller::remove_finalizer(next, RETURN_BORROWED_FINALIZER);
  client_.update(hybrid_training_jobs_type(), next);  // a Conflict requeues the key
  return {};
}

ReconcileResult JobReconciler::finish(Pass& p) {
  if (!p.sources.empty()) {
    return_borrowed(p, "the job finished");
    write_status(p);
  }
  const std::string& policy = p.job.spec.run_policy.clean_pod_policy;
  if (policy != "None") {
    for (const json& pod : p.pods) {
      const std::string phase = pod_phase(pod);
      const bool running = phase != "Succeeded" && phase != "Failed";
      if (!terminating(pod) && (policy == "All" || running)) delete_quietly(kube::pods_type(), p.ns, name_of(pod));
    }
  }
  const std::optional<int64_t> ttl = p.job.spec.run_policy.ttl_seconds_after_finished;
  if (!ttl || p.status.completion_time.empty()) return {};
  const double remaining = kube::kube_time_parse(p.status.completion_time) + double(*ttl) - now();
  if (remaining <= 0) {
    delete_quietly(hybrid_training_jobs_type(), p.ns, p.name);
    return {};
  }
  return requeue_after(std::chrono::milliseconds(int64_t(std::ceil(remaining * 1000))));
}

}  // namespace qsync::reconciler
