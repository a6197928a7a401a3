// File: operator/reconciler/job_reconciler.cpp
// The HybridTrainingJob reconcile pass (see job_reconciler.h); how a job ends is in
// job_ending.cpp, the lending and elastic parts in job_lending_pass.cpp and job_elastic_pass.cpp.
#include "operator/reconciler/job_reconciler.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "operator/api/group_version.h"
#include "operator/controller/finalizers.h"
#include "operator/controller/owner_refs.h"
#include "operator/reconciler/job_reconcile_pass.h"
#include "operator/reconciler/node_placement.h"
#include "operator/reconciler/worker_pod_settings.h"
#include "planner/worker_command.h"

namespace qsync::reconciler {

namespace {

using json = nlohmann::json;
using controller::ReconcileResult;
using namespace pass;

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", s);
  return buf;
}

}  // namespace

JobReconciler::JobReconciler(kube::KubeClient& client, ClusterReader& reader, kube::EventRecorder* events,
                             JobMetrics* metrics, ReconcilerOptions options)
    : client_(client), reader_(reader), events_(events), metrics_(metrics), options_(std::move(options)) {}

lending::DemandSource& JobReconciler::demand_source() {
  if (options_.demand_source != nullptr) return *options_.demand_source;
  if (!own_demand_source_) own_demand_source_ = std::make_unique<lending::PrometheusDemandSource>();
  return *own_demand_source_;
}

double JobReconciler::now() const {
  if (options_.now_seconds) return options_.now_seconds();
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void JobReconciler::record(Pass& p, const std::string& type, const std::string& reason, const std::string& message) {
  if (events_ != nullptr) events_->record(p.object, type, reason, message);
}

void JobReconciler::delete_quietly(const kube::ResourceType& type, const std::string& ns, const std::string& name) {
  try {
    client_.remove(type, ns, name, kube::PropagationPolicy::BACKGROUND);
  } catch (const kube::KubeError& e) {
    if (!kube::is_not_found(e)) throw;
  }
}

void JobReconciler::write_status(Pass& p) {
  p.status.observed_generation = p.generation;
  if (p.status == p.old_status) return;
  json object = p.object;
  object["status"] = api::to_json(p.status);
  p.object = client_.update_status(hybrid_training_jobs_type(), object);
  if (metrics_ != nullptr) {
    using api::is_true;
    // Created the first time: no Created condition yet, or only the first attempt's CreateFailed.
    const api::Condition* was = api::find_condition(p.old_status.conditions, api::CONDITION_CREATED);
    if (is_true(p.status.conditions, api::CONDITION_CREATED) &&
        (was == nullptr || (was->reason == "CreateFailed" && p.status.restarts == 0)))
      metrics_->job_created();
    if (!is_true(p.old_status.conditions, api::CONDITION_SUCCEEDED) && is_true(p.status.conditions, api::CONDITION_SUCCEEDED))
      metrics_->job_succeeded();
    if (!is_true(p.old_status.conditions, api::CONDITION_FAILED) && is_true(p.status.conditions, api::CONDITION_FAILED))
      metrics_->job_failed();
    for (int64_t r = p.old_status.restarts; r < p.status.restarts; ++r) metrics_->job_restarted();
    metrics_->set_job_restarts(p.ns, p.name, double(p.status.restarts));
  }
  p.old_status = p.status;
}

ReconcileResult JobReconciler::reconcile(const std::string& key) {
  Pass p;
  std::tie(p.ns, p.name) = kube::split_object_key(key);
  const std::optional<json> object = reader_.job(p.ns, p.name);
  if (!object) return {};
  if (terminating(*object)) return finalize(*object);  // going: the garbage collector takes the children
  p.object = *object;
  p.uid = p.object["metadata"].value("uid", "");
  p.generation = p.object["metadata"].value("generation", int64_t(0));
  p.now = kube::kube_time_format(std::floor(now()));
  try {
    p.job = api::hybrid_training_job_from_json(p.object);
    p.sources = borrow_sources(p.job.spec);  // cron windows, time zones: refused before any work
    p.bounds = elastic_bounds(p.job.spec);
  } catch (const std::invalid_argument& e) {
    // An invalid spec the schema let through: fail it once, with the parser's message.
    try {
      if (p.object.contains("status")) p.old_status = api::hybrid_training_job_status_from_json(p.object["status"]);
    } catch (const std::invalid_argument&) {
      p.old_status = {};
    }
    p.status = p.old_status;
    if (api::is_finished(p.status.conditions)) return {};
    mark_finished(p, api::CONDITION_FAILED, "InvalidSpec", std::string("invalid spec: ") + e.what());
    write_status(p);
    return {};
  }
  p.old_status = p.job.status.value_or(api::HybridTrainingJobStatus{});
  p.status = p.old_status;
  // Queued in Kueue: what its pods need, so the queue can reserve quota before unsuspending it.
  const bool queued = p.object["metadata"].value("labels", json::object()).contains(KUEUE_QUEUE_LABEL);
  p.status.pod_sets = queued ? kueue_pod_sets(p.job) : std::vector<api::PodSetStatus>{};
  for (json& pod : reader_.job_pods(p.ns, p.name))
    if (owned_by(pod, p.uid)) p.pods.push_back(std::move(pod));
  for (const json& pod : p.pods)  // never lowered: an earlier attempt's pods may be gone
    p.status.last_checkpoint_step = std::max(p.status.last_checkpoint_step, reported_checkpoint_step(pod));
  // The pass that created the pods may have failed to write startTime (a conflict, a crash):
  // the earliest start of the job's pods is when it started, and activeDeadlineSeconds counts from it.
  if (p.status.start_time.empty()) p.status.start_time = earliest_pod_start(p.pods);
  if (options_.reported_checkpoints != nullptr)
    p.status.last_checkpoint_step = std::max(p.status.last_checkpoint_step, options_.reported_checkpoints->step_for(p.uid));

  if (!p.sources.empty() && !api::is_finished(p.status.conditions) &&
      controller::add_finalizer(p.object, RETURN_BORROWED_FINALIZER))
    p.object = client_.update(hybrid_training_jobs_type(), p.object);  // before anything is borrowed
  if (api::is_finished(p.status.conditions)) {
    if (p.status.last_checkpoint_step != p.old_status.last_checkpoint_step) write_status(p);  // a late report
    if (queued) finish_kueue_workload(p);
    return finish(p);
  }
  const std::string& manager = p.job.spec.run_policy.managed_by;
  if (!manager.empty() && manager != api::OPERATOR_MANAGER) return {};
  if (queued) {
    if (std::optional<ReconcileResult> r = queue_in_kueue(p)) return *r;
  } else if (!p.old_status.pod_sets.empty()) {
    leave_kueue(p);
  }
  if (p.job.spec.run_policy.suspend) {
    if (!p.sources.empty()) return_borrowed(p, "the job is suspended");
    return suspend(p);
  }
  if (api::is_true(p.status.conditions, api::CONDITION_SUSPENDED)) {
    api::set_condition(p.status.conditions, api::CONDITION_SUSPENDED, api::CONDITION_FALSE, "Resumed",
                       "resumed: the workers restart from the last checkpoint", p.generation, p.now);
    record(p, "Normal", "Resumed", "resumed: the workers restart from the last checkpoint");
  }
  const std::optional<int64_t> deadline = p.job.spec.run_policy.active_deadline_seconds;
  if (deadline && !p.status.start_time.empty() && now() - kube::kube_time_parse(p.status.start_time) >= double(*deadline)) {
    mark_finished(p, api::CONDITION_FAILED, "DeadlineExceeded",
                  "the job ran longer than spec.runPolicy.activeDeadlineSeconds (" + std::to_string(*deadline) + " s)");
    write_status(p);
    return finish(p);
  }
  return run_active(p);
}

ReconcileResult JobReconciler::planning_failed(Pass& p, const PlanningError& e) {
  api::set_condition(p.status.conditions, api::CONDITION_PLANNED, api::CONDITION_FALSE, e.reason(), e.what(), p.generation,
                     p.now);
  if (e.terminal()) {
    mark_finished(p, api::CONDITION_FAILED, e.reason(), e.what());
    write_status(p);
    return finish(p);
  }
  // Planning waits for the cluster (a profile, capacity, a toleration): the job stays in Planning.
  p.status.phase = api::PHASE_PLANNING;
  p.status.message = e.what();
  record(p, "Warning", e.reason(), e.what());
  write_status(p);
  return requeue_after(options_.waiting_requeue);
}

namespace {

// The plan of the ConfigMap when it was made for this generation and attempt.
bool read_plan(const std::optional<json>& plan_cm, const std::string& uid, int64_t generation, int64_t attempt, JobPlan& plan) {
  if (!plan_cm || !owned_by(*plan_cm, uid)) return false;
  const json annotations = (*plan_cm)["metadata"].value("annotations", json::object());
  if (annotations.value(GENERATION_ANNOTATION, "") != std::to_string(generation) ||
      annotations.value(ATTEMPT_ANNOTATION, "") != std::to_string(attempt) || !plan_cm->contains("data") ||
      !(*plan_cm)["data"].contains("plan.json"))
    return false;
  try {
    plan = job_plan_from_json(json::parse((*plan_cm)["data"]["plan.json"].get<std::string>()));
    return !plan.ranks.empty();
  } catch (const std::exception&) {
    return false;  // unreadable: plan again and overwrite it
  }
}

}  // namespace

ReconcileResult JobReconciler::run_active(Pass& p) {
  // The plan: reused while it was made for this generation and attempt (restarts + resizes).
  ElasticStep step;
  const std::string plan_name = plan_config_map_name(p.name);
  const std::optional<json> plan_cm = reader_.config_map(p.ns, plan_name);
  step.planned = read_plan(plan_cm, p.uid, p.generation, p.status.restarts + p.status.resizes, step.plan);
  if (p.bounds.elastic) {
    p.nodes = reader_.nodes();
    try {
      if (std::optional<ReconcileResult> done = elastic_pool(p, step)) return *done;
    } catch (const PlanningError& e) {
      return planning_failed(p, e);
    }
  }
  const int64_t attempt = p.status.restarts + p.status.resizes;
  if (!step.planned) {
    const auto start = std::chrono::steady_clock::now();
    try {
      if (step.plan_for_offer) {
        step.plan = *step.plan_for_offer;
      } else {
        const std::vector<json> nodes = p.bounds.elastic ? p.nodes : reader_.nodes();
        const PlacementLimits limits =
            placement_limits(nodes, reader_.all_pods(), p.uid, p.job, options_.children.gpu_tolerations);
        step.plan = plan_job(p.job, {.nodes = nodes,
                                     .config_maps = reader_.config_maps(p.ns),
                                     .capacity = p.bounds.elastic ? &step.capacity : nullptr,
                                     .limits = &limits});
      }
    } catch (const PlanningError& e) {
      return planning_failed(p, e);
    }
    if (metrics_ != nullptr)
      metrics_->planning_finished(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    json desired = desired_plan_config_map(p.object, p.job, step.plan, attempt);
    if (plan_cm) {
      desired["metadata"]["resourceVersion"] = (*plan_cm)["metadata"].value("resourceVersion", "");
      client_.update(kube::config_maps_type(), desired);  // a Conflict requeues the key
    } else {
      client_.create(kube::config_maps_type(), p.ns, desired);  // AlreadyExists: a stale cache, requeue
    }
    const std::string message = std::to_string(step.plan.ranks.size()) + " ranks planned by " + step.plan.summary.strategy +
                                ", predicted " + seconds_text(step.plan.summary.predicted_step_seconds) +
                                " s/step (ConfigMap " + plan_name + ")";
    api::set_condition(p.status.conditions, api::CONDITION_PLANNED, api::CONDITION_TRUE, "PlanReady", message,
                       p.generation, p.now);
    p.status.plan = step.plan.summary;
    record(p, "Normal", "Planned", message);
  }
  if (p.bounds.elastic) note_borrowed(p, step.plan);
  return run_pods(p, step.plan, attempt, step.note);
}

void JobReconciler::note_borrowed(Pass& p, const JobPlan& plan) {
  int64_t total = 0;
  for (api::LendingStatus& l : p.status.lending) {
    l.borrowed_devices = 0;
    for (const DiscoveredRank& r : plan.ranks)
      if (r.pool_kind == POOL_KIND_INFERENCE && r.entry == l.entry) l.borrowed_devices += std::max<int64_t>(1, r.gpus);
    total += l.borrowed_devices;
  }
  p.status.borrowed_devices = total;
  if (metrics_ != nullptr) metrics_->set_borrowed_devices(p.ns, p.name, double(total));
}

}  // namespace qsync::reconciler
