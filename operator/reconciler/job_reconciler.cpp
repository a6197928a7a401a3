// File: operator/reconciler/job_reconciler.cpp
// The HybridTrainingJob reconcile pass (see job_reconciler.h); how a job ends is in
// job_ending.cpp, the lending and elastic parts in job_lending_pass.cpp and job_elastic_pass.cpp.
#include "operator/reconciler/job_reconciler.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <set>

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

// The exit code of the pod's first terminated container, -1 when none says.
int exit_code_of(const json& pod) {
  if (!pod.contains("status") || !pod["status"].contains("containerStatuses")) return -1;
  for (const json& c : pod["status"]["containerStatuses"]) {
    if (c.contains("state") && c["state"].contains("terminated"))
      return c["state"]["terminated"].value("exitCode", -1);
  }
  return -1;
}
// How a failed pod's exit reads in status: exit code 3 is a collective that failed, most often
// because another rank was lost first (planner/worker_command.h).
std::string failure_of(const json& pod) {
  const int code = exit_code_of(pod);
  return "rank " + label(pod, RANK_LABEL) + " failed (exit code " + std::to_string(code) +
         (code == WORKER_EXIT_COLLECTIVE_FAILED ? ": a collective failed, usually because another rank was lost)" : ")");
}
ReconcileResult requeue_with_backoff() {
  ReconcileResult r;
  r.requeue = true;
  return r;
}
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

ReconcileResult JobReconciler::run_pods(Pass& p, const JobPlan& plan, int64_t attempt, const std::string& note) {
  const int64_t world = int64_t(plan.ranks.size());
  if (!p.bounds.elastic && metrics_ != nullptr) metrics_->set_borrowed_devices(p.ns, p.name, 0);
  std::set<std::string> node_names;
  for (const json& n : p.nodes) node_names.insert(name_of(n));

  // The Service, then one Pod per rank of this attempt.
  std::vector<std::string> errors;
  if (!reader_.service(p.ns, service_name(p.name))) {
    try {
      client_.create(kube::services_type(), p.ns, desired_service(p.object, p.job, options_.children));
    } catch (const kube::KubeError& e) {
      if (!kube::is_already_exists(e)) errors.push_back("service " + service_name(p.name) + ": " + e.api_message());
    }
  }
  const bool group_ready = ensure_pod_group(p, world, errors);  // before any pod (job_pod_group_pass.cpp)
  std::map<int64_t, const json*> current;  // this attempt's pods by rank
  int64_t stale = 0;                        // pods of an older attempt (or dropped ranks) not gone yet
  int64_t resized = 0;                      // this attempt's pods of another world size (a changed count)
  for (const json& pod : p.pods) {
    const std::string rank_text = label(pod, RANK_LABEL);
    const int64_t rank = rank_text.empty() ? -1 : std::stoll(rank_text);
    const std::string pod_world = pod["metadata"].value("annotations", json::object()).value(WORLD_SIZE_ANNOTATION, "");
    const bool same_world = pod_world.empty() || pod_world == std::to_string(world);
    if (!same_world && !terminating(pod)) ++resized;
    if (label(pod, ATTEMPT_LABEL) == std::to_string(attempt) && rank >= 0 && rank < world && same_world) {
      current[rank] = &pod;
    } else {
      ++stale;
      const std::string node = pod_node(pod);
      if (p.bounds.elastic && !node.empty() && node_names.count(node) == 0) {
        // Its node is gone: no kubelet will ever stop it. Remove it now (what the pod garbage
        // collector does for orphaned pods); the job resumes from the last checkpoint.
        try {
          client_.remove_with_grace(kube::pods_type(), p.ns, name_of(pod), 0);
        } catch (const kube::KubeError& e) {
          if (!kube::is_not_found(e)) throw;
        }
      } else if (!terminating(pod)) {
        delete_quietly(kube::pods_type(), p.ns, name_of(pod));  // an older attempt, or a rank the plan dropped
      }
    }
  }
  if (resized > 0)
    record(p, "Normal", "Replanned",
           "the pool's size changed to " + std::to_string(world) + " ranks: stopping the " + std::to_string(resized) +
               " pods of the old size (they checkpoint), then starting all ranks from the last checkpoint");
  const bool was_created = api::is_true(p.status.conditions, api::CONDITION_CREATED);
  int64_t created = 0, blocked = 0, vanished_rank = -1;
  for (const DiscoveredRank& rank : plan.ranks) {
    if (current.count(rank.rank)) continue;
    if (!group_ready) break;  // the gang scheduler would hold them Pending forever, or no gang at all
    // No rank of a new attempt starts while a pod of the old one is still terminating: its rank 0
    // may still hold the rendezvous port, and a new rank could join the old rendezvous. Wait.
    if (stale > 0) {
      ++blocked;
      continue;
    }
    const std::string name = pod_name(p.name, rank.rank);
    if (was_created && !current.empty()) {
      // Created before and missing now: confirm with the API (the cache may lag a create).
      const std::optional<json> live = client_.get_if_exists(kube::pods_type(), p.ns, name);
      if (live && label(*live, ATTEMPT_LABEL) == std::to_string(attempt)) continue;
      if (!live) {
        if (vanished_rank < 0) vanished_rank = rank.rank;
        continue;
      }
    }
    try {
      client_.create(kube::pods_type(), p.ns, desired_pod(p.object, p.job, rank, world, attempt, options_.children, plan.ranks));
      ++created;
    } catch (const kube::KubeError& e) {
      if (kube::is_already_exists(e)) {  // an older attempt's pod still terminating, or a stale cache
        ++blocked;
        continue;
      }
      errors.push_back("pod " + name + ": " + e.api_message());
      record(p, "Warning", "FailedCreatePod", "creating pod " + name + ": " + e.api_message());
    }
  }
  if (created > 0) {
    if (!was_created && !p.job.spec.checkpoint.volume)
      record(p, "Warning", "CheckpointsNotPersistent",
             "spec.checkpoint.volume is not set: checkpoints live in each pod's emptyDir and are lost when the job "
             "restarts; set spec.checkpoint.volume.claimName to a PersistentVolumeClaim to resume from them");
    record(p, "Normal", "SuccessfulCreatePod",
           "created " + std::to_string(created) + " worker pods (attempt " + std::to_string(attempt) + ")");
    if (p.status.start_time.empty()) p.status.start_time = p.now;
  }
  if (!errors.empty()) {
    std::string message = "creating the job's children failed: ";
    for (size_t i = 0; i < errors.size(); ++i) message += (i ? "; " : "") + errors[i];
    api::set_condition(p.status.conditions, api::CONDITION_CREATED, api::CONDITION_FALSE, "CreateFailed", message,
                       p.generation, p.now);
    p.status.message = message;
    if (!api::is_true(p.status.conditions, api::CONDITION_RESTARTING)) p.status.phase = api::PHASE_PENDING;
    write_status(p);
    return requeue_with_backoff();
  }
  if (blocked == 0)
    api::set_condition(p.status.conditions, api::CONDITION_CREATED, api::CONDITION_TRUE, "PodsCreated",
                       "service " + service_name(p.name) + " and " + std::to_string(world) + " worker pods (attempt " +
                           std::to_string(attempt) + ")",
                       p.generation, p.now);

  // Derive the job's state from this attempt's pods (pods created in this pass are Pending).
  int64_t running = 0, succeeded = 0, failed = 0;
  const json* cause = nullptr;  // the lowest Failed rank, one that failed otherwise than by a collective first
  for (const auto& [rank, pod] : current) {
    const std::string phase = pod_phase(*pod);
    if (terminating(*pod) && (phase == "Succeeded" || phase == "Failed")) continue;  // deleted: not the job's outcome
    if (phase == "Running") ++running;
    if (phase == "Succeeded") ++succeeded;
    if (phase == "Failed") {
      ++failed;
      const bool by_collective = exit_code_of(*pod) == WORKER_EXIT_COLLECTIVE_FAILED;
      if (cause == nullptr || (exit_code_of(*cause) == WORKER_EXIT_COLLECTIVE_FAILED && !by_collective)) cause = pod;
    }
  }
  p.status.replicas = {world, world - succeeded - failed - (vanished_rank >= 0 ? 1 : 0), succeeded, failed};
  if (world > 0 && succeeded == world) {
    mark_finished(p, api::CONDITION_SUCCEEDED, "JobSucceeded",
                  "all " + std::to_string(world) + " ranks finished training");
    write_status(p);
    return finish(p);
  }
  if (cause != nullptr || vanished_rank >= 0) {
    const std::string what =
        cause != nullptr
            ? failure_of(*cause)
            : "rank " + std::to_string(vanished_rank) + "'s pod was deleted";
    const int64_t limit = p.job.spec.run_policy.backoff_limit;
    if (p.status.restarts >= limit) {
      mark_finished(p, api::CONDITION_FAILED, "BackoffLimitExceeded",
                    what + " and the job has restarted " + std::to_string(p.status.restarts) +
                        " times (spec.runPolicy.backoffLimit " + std::to_string(limit) + ")");
      write_status(p);
      return finish(p);
    }
    for (const json& pod : p.pods)
      if (!terminating(pod)) delete_quietly(kube::pods_type(), p.ns, name_of(pod));
    p.status.restarts += 1;
    const std::string message = "Restarting: " + what + "; restart " + std::to_string(p.status.restarts) + " of " +
                                std::to_string(limit) + " from the last checkpoint";
    api::set_exclusive_running(p.status.conditions, api::CONDITION_RESTARTING, "WorkerFailed", message, p.generation, p.now);
    api::set_condition(p.status.conditions, api::CONDITION_CREATED, api::CONDITION_FALSE, "Restarting",
                       "recreating the worker pods for attempt " + std::to_string(p.status.restarts), p.generation, p.now);
    p.status.phase = api::PHASE_RESTARTING;
    p.status.message = message;
    p.status.replicas = {world, 0, 0, 0};
    record(p, "Warning", "Restarting", message);
    write_status(p);
    return requeue_after(std::chrono::milliseconds(200));
  }
  if (running == world) {
    api::set_exclusive_running(p.status.conditions, api::CONDITION_RUNNING, "AllRanksRunning",
                               "all " + std::to_string(world) + " ranks are running", p.generation, p.now);
    p.status.phase = api::PHASE_RUNNING;
    p.status.message = note;
  } else {
    const api::Condition* run = api::find_condition(p.status.conditions, api::CONDITION_RUNNING);
    p.status.phase = api::is_true(p.status.conditions, api::CONDITION_RESTARTING) ? api::PHASE_RESTARTING
                     : api::is_true(p.status.conditions, api::CONDITION_RUNNING)   ? api::PHASE_RUNNING
                     : run != nullptr && run->reason == "Resizing"                  ? api::PHASE_RESIZING
                                                                                    : api::PHASE_PENDING;
  }
  write_status(p);
  return requeue_after(options_.active_requeue);
}

}  // namespace qsync::reconciler
