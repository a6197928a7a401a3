// File: operator/reconciler/job_elastic_pass.cpp
// The elastic part of a reconcile pass (see job_reconciler.h): the pool offered now (training
// nodes' free GPUs, what the lending decisions lend) against the current plan's placement;
// below minRanks the workers stop after a checkpoint and the job waits; a lost slot shrinks the
// job at once; new slots grow it after the cooldown, and only when the planner predicts the
// bigger pool to be enough faster. A resize is a new attempt: the old pods get SIGTERM (they
// agree on a step and checkpoint it), the plan is made for the new pool, and the new pods
// resume from that checkpoint at the new world size.
#include "operator/lending/elastic_resize.h"
#include "operator/reconciler/job_reconcile_pass.h"

namespace qsync::reconciler {
namespace {

std::string slots_key(const std::vector<lending::RankSlot>& slots) {
  std::vector<lending::RankSlot> sorted = slots;
  std::sort(sorted.begin(), sorted.end());
  std::string key;
  for (const lending::RankSlot& s : sorted) key += s.entry + "@" + s.node + ":" + s.device_class + ";";
  return key;
}

}  // namespace

std::optional<controller::ReconcileResult> JobReconciler::elastic_pool(Pass& p, ElasticStep& step) {
  step.capacity = lend(p);
  const std::vector<DiscoveredRank> offered = [&] {
    try {
      return discover_pool(p.job.spec.pool, p.nodes, &step.capacity).ranks;
    } catch (const PoolDiscoveryError& e) {
      throw PlanningError(e.reason(), e.what(), false);
    }
  }();
  const int64_t attempt = p.status.restarts + p.status.resizes;
  bool has_pods = false;
  for (const nlohmann::json& pod : p.pods)
    has_pods = has_pods || (pass::label(pod, ATTEMPT_LABEL) == std::to_string(attempt) && !pass::terminating(pod));
  lending::ResizeInputs in;
  if (step.planned) in.current = rank_slots(step.plan.ranks);
  in.current_has_pods = has_pods;
  in.offered = rank_slots(offered);
  in.min_ranks = p.bounds.min_ranks;
  in.now = now();
  in.last_resize = p.status.last_resize ? kube::kube_time_parse(p.status.last_resize->time) : 0;
  in.grow_cooldown_seconds = p.bounds.grow_cooldown_seconds;
  const lending::ResizeDecision d = lending::decide_resize(in);
  step.note = d.message;

  switch (d.action) {
    case lending::ResizeAction::NONE:
      return std::nullopt;
    case lending::ResizeAction::REPLAN:
      step.planned = false;
      return std::nullopt;
    case lending::ResizeAction::WAIT:
      return wait_for_ranks(p, d, has_pods);
    case lending::ResizeAction::RESIZE:
      break;
  }
  if (d.reason == "PoolGrew" && !growth_pays_off(p, step, d, slots_key(in.offered))) return std::nullopt;
  count_resize(p, d);
  step.planned = false;
  const std::string message = "Resizing: " + d.message;
  api::set_condition(p.status.conditions, api::CONDITION_RUNNING, api::CONDITION_FALSE, "Resizing", message,
                     p.generation, p.now);
  p.status.phase = api::PHASE_RESIZING;
  p.status.message = message;
  record(p, "Normal", "Resizing", d.message);
  return std::nullopt;
}

void JobReconciler::count_resize(Pass& p, const lending::ResizeDecision& d) {
  api::ResizeStatus r;
  r.time = p.now;
  r.reason = d.reason;
  r.message = d.message;
  r.from_ranks = d.from_ranks;
  r.to_ranks = d.action == lending::ResizeAction::WAIT ? 0 : d.to_ranks;
  r.checkpoint_step = p.status.last_checkpoint_step;
  p.status.last_resize = r;
  p.status.resizes += 1;
  if (metrics_ != nullptr) metrics_->resized(d.reason);
}

controller::ReconcileResult JobReconciler::wait_for_ranks(Pass& p, const lending::ResizeDecision& d, bool has_pods) {
  int64_t stopped = 0;
  for (const nlohmann::json& pod : p.pods)
    if (!pass::terminating(pod)) {
      delete_quietly(kube::pods_type(), p.ns, pass::name_of(pod));
      ++stopped;
    }
  if (has_pods) {
    count_resize(p, d);
    record(p, "Warning", "Waiting", d.message + " (" + std::to_string(stopped) + " pods stopped)");
  }
  api::set_condition(p.status.conditions, api::CONDITION_PLANNED, api::CONDITION_FALSE, d.reason, d.message,
                     p.generation, p.now);
  if (api::find_condition(p.status.conditions, api::CONDITION_RUNNING) != nullptr)
    api::set_condition(p.status.conditions, api::CONDITION_RUNNING, api::CONDITION_FALSE, d.reason, d.message,
                       p.generation, p.now);
  p.status.phase = api::PHASE_WAITING;
  p.status.message = d.message;
  p.status.replicas = {0, 0, 0, 0};
  p.status.borrowed_devices = 0;
  write_status(p);
  return pass::requeue_after(options_.waiting_requeue);
}

bool JobReconciler::growth_pays_off(Pass& p, ElasticStep& step, const lending::ResizeDecision& d,
                                    const std::string& offer_key) {
  double offered_step = 0;
  {
    std::lock_guard<std::mutex> lock(growth_mu_);
    auto it = growth_checks_.find(p.uid);
    if (it != growth_checks_.end() && it->second.first == offer_key) offered_step = it->second.second;
  }
  if (offered_step == 0) {
    step.plan_for_offer =
        plan_job(p.job, {.nodes = p.nodes, .config_maps = reader_.config_maps(p.ns), .capacity = &step.capacity});
    offered_step = step.plan_for_offer->summary.predicted_step_seconds;
    std::lock_guard<std::mutex> lock(growth_mu_);
    growth_checks_[p.uid] = {offer_key, offered_step};
  }
  const double current_step = step.plan.summary.predicted_step_seconds;
  if (lending::growth_pays(current_step, offered_step, p.bounds.min_growth_gain)) return true;
  step.note = "the pool offers " + std::to_string(d.to_ranks) + " ranks, but the planner predicts " +
              std::to_string(offered_step) + " s/step against " + std::to_string(current_step) +
              " s/step now: growing would not pay for its restart";
  step.plan_for_offer.reset();
  return false;
}

}  // namespace qsync::reconciler
