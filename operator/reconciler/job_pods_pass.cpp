// File: operator/reconciler/job_pods_pass.cpp
// The worker pods of a job's pass (see job_reconciler.h): the Service and one Pod per rank of the
// current attempt (pods of older attempts, other world sizes or dropped ranks deleted first),
// then the job's state derived from this attempt's pods: all Succeeded, a rank Failed or its pod
// gone (a whole-job restart within spec.runPolicy.backoffLimit), all Running, or still Pending.
#include <chrono>
#include <map>
#include <set>

#include "operator/api/group_version.h"
#include "operator/reconciler/job_reconcile_pass.h"
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

}  // namespace

// The job's pods, sorted: this attempt's by rank; the others deleted (a pod whose node is gone is
// removed at once: no kubelet will ever stop it).
JobReconciler::PodCensus JobReconciler::census_pods(Pass& p, int64_t world, int64_t attempt) {
  std::set<std::string> node_names;
  for (const json& n : p.nodes) node_names.insert(name_of(n));
  PodCensus c;
  for (const json& pod : p.pods) {
    const std::string rank_text = label(pod, RANK_LABEL);
    const int64_t rank = rank_text.empty() ? -1 : std::stoll(rank_text);
    const std::string pod_world = pod["metadata"].value("annotations", json::object()).value(WORLD_SIZE_ANNOTATION, "");
    const bool same_world = pod_world.empty() || pod_world == std::to_string(world);
    if (!same_world && !terminating(pod)) ++c.resized;
    if (label(pod, ATTEMPT_LABEL) == std::to_string(attempt) && rank >= 0 && rank < world && same_world) {
      c.current[rank] = &pod;
      continue;
    }
    ++c.stale;
    const std::string node = pod_node(pod);
    if (p.bounds.elastic && !node.empty() && node_names.count(node) == 0) {
      // What the pod garbage collector does for orphaned pods; the job resumes from the last checkpoint.
      try {
        client_.remove_with_grace(kube::pods_type(), p.ns, name_of(pod), 0);
      } catch (const kube::KubeError& e) {
        if (!kube::is_not_found(e)) throw;
      }
    } else if (!terminating(pod)) {
      delete_quietly(kube::pods_type(), p.ns, name_of(pod));  // an older attempt, or a rank the plan dropped
    }
  }
  if (c.resized > 0)
    record(p, "Normal", "Replanned",
           "the pool's size changed to " + std::to_string(world) + " ranks: stopping the " + std::to_string(c.resized) +
               " pods of the old size (they checkpoint), then starting all ranks from the last checkpoint");
  return c;
}

// Creates the pods of the plan's ranks that this attempt lacks: none while the gang cannot be
// scheduled, or while a pod of an older attempt is still terminating (its rank 0 may still hold
// the rendezvous port, and a new rank could join the old rendezvous). A pod created before and
// missing now (confirmed with the API: the cache may lag a create) is a vanished rank.
void JobReconciler::create_missing_pods(Pass& p, const JobPlan& plan, int64_t attempt, bool group_ready,
                                        PodCensus& c, std::vector<std::string>& errors) {
  const int64_t world = int64_t(plan.ranks.size());
  const bool was_created = api::is_true(p.status.conditions, api::CONDITION_CREATED);
  for (const DiscoveredRank& rank : plan.ranks) {
    if (c.current.count(rank.rank)) continue;
    if (!group_ready) break;  // the gang scheduler would hold them Pending forever, or no gang at all
    if (c.stale > 0) {
      ++c.blocked;
      continue;
    }
    const std::string name = pod_name(p.name, rank.rank);
    if (was_created && !c.current.empty()) {
      const std::optional<json> live = client_.get_if_exists(kube::pods_type(), p.ns, name);
      if (live && label(*live, ATTEMPT_LABEL) == std::to_string(attempt)) continue;
      if (!live) {
        if (c.vanished_rank < 0) c.vanished_rank = rank.rank;
        continue;
      }
    }
    try {
      client_.create(kube::pods_type(), p.ns, desired_pod(p.object, p.job, rank, world, attempt, options_.children, plan.ranks));
      ++c.created;
    } catch (const kube::KubeError& e) {
      if (kube::is_already_exists(e)) {  // an older attempt's pod still terminating, or a stale cache
        ++c.blocked;
        continue;
      }
      errors.push_back("pod " + name + ": " + e.api_message());
      record(p, "Warning", "FailedCreatePod", "creating pod " + name + ": " + e.api_message());
    }
  }
  if (c.created > 0) {
    if (!was_created && !p.job.spec.checkpoint.volume)
      record(p, "Warning", "CheckpointsNotPersistent",
             "spec.checkpoint.volume is not set: checkpoints live in each pod's emptyDir and are lost when the job "
             "restarts; set spec.checkpoint.volume.claimName to a PersistentVolumeClaim to resume from them");
    record(p, "Normal", "SuccessfulCreatePod",
           "created " + std::to_string(c.created) + " worker pods (attempt " + std::to_string(attempt) + ")");
    if (p.status.start_time.empty()) p.status.start_time = p.now;
  }
}

ReconcileResult JobReconciler::run_pods(Pass& p, const JobPlan& plan, int64_t attempt, const std::string& note) {
  const int64_t world = int64_t(plan.ranks.size());
  if (!p.bounds.elastic && metrics_ != nullptr) metrics_->set_borrowed_devices(p.ns, p.name, 0);
  std::vector<std::string> errors;
  if (!reader_.service(p.ns, service_name(p.name))) {
    try {
      client_.create(kube::services_type(), p.ns, desired_service(p.object, p.job, options_.children));
    } catch (const kube::KubeError& e) {
      if (!kube::is_already_exists(e)) errors.push_back("service " + service_name(p.name) + ": " + e.api_message());
    }
  }
  const bool group_ready = ensure_pod_group(p, world, errors);  // before any pod (job_pod_group_pass.cpp)
  PodCensus census = census_pods(p, world, attempt);
  create_missing_pods(p, plan, attempt, group_ready, census, errors);
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
  if (census.blocked == 0)
    api::set_condition(p.status.conditions, api::CONDITION_CREATED, api::CONDITION_TRUE, "PodsCreated",
                       "service " + service_name(p.name) + " and " + std::to_string(world) + " worker pods (attempt " +
                           std::to_string(attempt) + ")",
                       p.generation, p.now);
  return settle_from_pods(p, world, census, note);
}

// The job's state from this attempt's pods (pods created in this pass are Pending).
ReconcileResult JobReconciler::settle_from_pods(Pass& p, int64_t world, const PodCensus& c, const std::string& note) {
  int64_t running = 0, succeeded = 0, failed = 0;
  const json* cause = nullptr;  // the lowest Failed rank, one that failed otherwise than by a collective first
  for (const auto& [rank, pod] : c.current) {
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
  p.status.replicas = {world, world - succeeded - failed - (c.vanished_rank >= 0 ? 1 : 0), succeeded, failed};
  if (world > 0 && succeeded == world) {
    mark_finished(p, api::CONDITION_SUCCEEDED, "JobSucceeded",
                  "all " + std::to_string(world) + " ranks finished training");
    write_status(p);
    return finish(p);
  }
  if (cause != nullptr || c.vanished_rank >= 0)
    return restart_or_fail(p, world, cause != nullptr ? failure_of(*cause)
                                                      : "rank " + std::to_string(c.vanished_rank) + "'s pod was deleted");
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

// A rank failed (`what` says how): a whole-job restart from the last checkpoint while
// status.restarts < spec.runPolicy.backoffLimit, else Failed.
ReconcileResult JobReconciler::restart_or_fail(Pass& p, int64_t world, const std::string& what) {
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

}  // namespace qsync::reconciler
