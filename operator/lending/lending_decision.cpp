// File: operator/lending/lending_decision.cpp
// The pure lending decision of one borrowed workload (see lending_decision.h).
#include "operator/lending/lending_decision.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace qsync::lending {
namespace {

std::string text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}
std::string n(int64_t v) { return std::to_string(v); }

// Why lending is not allowed now ("" when it is), and the message.
struct Gate {
  std::string reason, message;
};

Gate window_gate(const LendingPolicy& p, double now) {
  if (p.windows.empty()) return {};
  const WindowState w = window_state(p.windows, int64_t(std::floor(now)));
  if (!w.open)
    return {"WindowClosed", "outside the lending windows" +
                                (w.opens_at >= 0 ? "; the next opens in " + n(w.opens_at - int64_t(now)) + " s" : std::string())};
  if (w.closes_at >= 0 && double(w.closes_at) - now <= p.reclaim_grace_seconds)
    return {"WindowClosing", "the lending window closes in " + n(w.closes_at - int64_t(now)) +
                                 " s, within reclaimGraceSeconds: the replicas come back before it closes"};
  return {};
}

// What the policy and the demand allow now: the gate (why not to lend, "" when lending is
// allowed), the replicas demand needs and those that still cover it at half the headroom (the
// hysteresis of giving replicas back), both within [floor, serving].
struct DemandView {
  Gate gate;
  int64_t needed, keep;
};

DemandView demand_view(const LendingInputs& in, int64_t floor, int64_t serving) {
  const LendingPolicy& p = *in.policy;
  DemandView v{{}, floor, floor};
  if (!in.workload.opted_in) {
    v.gate = {"NotOptedIn",
              "the workload does not carry the annotation qsync.dev/lendable: \"true\"; annotate it to lend its GPUs"};
    return v;
  }
  if (!p.demand) return v;
  const bool fresh = in.demand && in.demand->ok && in.now - in.demand->at <= p.demand->max_sample_age_seconds;
  if (!fresh) {
    v.gate = {"DemandUnknown", "no fresh demand sample" +
                                   (in.demand && !in.demand->error.empty() ? ": " + in.demand->error : std::string()) +
                                   "; nothing is lent until the signal is back"};
    return v;
  }
  try {
    v.needed = std::clamp(demand_replicas(*p.demand, in.demand->value, floor, serving), floor, serving);
    DemandPolicy half = *p.demand;
    half.headroom /= 2;
    v.keep = std::clamp(demand_replicas(half, in.demand->value, floor, serving), floor, serving);
    if (p.demand->sizing == DemandPolicy::Sizing::THRESHOLD && v.needed == serving && serving > floor)
      v.gate = {"DemandHigh", "the demand signal " + text(in.demand->value) + " is at or above the threshold " +
                                  text(p.demand->threshold)};
  } catch (const std::invalid_argument& e) {
    v.gate = {"DemandSizingFailed", std::string("sizing the demand failed: ") + e.what()};
  }
  return v;
}

// A reclaim starts when replicas must come back (an outside scale-out of a lent workload is one
// too: its new pods wait for the GPUs), and ends when they are Ready; a scale-in starts a lend.
void track_reclaim(const LendingInputs& in, int64_t target, bool scaled_outside, const std::string& reason,
                   LendingDecision& d) {
  const WorkloadObservation& w = in.workload;
  const bool reclaiming = d.memory.reclaim_started > 0;
  if (target > w.replicas || (scaled_outside && w.ready_replicas < target)) {
    if (!reclaiming) {
      d.memory.reclaim_started = in.now;
      d.memory.reclaim_reason = reason == "Lending" || reason == "Cooldown" ? "DemandHigh" : reason;
      d.reclaim_started = d.memory.reclaim_reason;
    }
    d.memory.reclaim_target = std::max(d.memory.reclaim_target, target);
    d.memory.last_change = in.now;
  } else if (target < w.replicas) {
    d.lend_started = true;
    d.memory.last_change = in.now;
  }
  if (d.memory.reclaim_started > 0 && !d.reclaim_started && w.replicas >= d.memory.reclaim_target &&
      w.ready_replicas >= d.memory.reclaim_target && w.unschedulable_pods == 0) {
    FinishedReclaim f;
    f.seconds = in.now - d.memory.reclaim_started;
    f.within_grace = f.seconds <= in.policy->reclaim_grace_seconds;
    f.reason = d.memory.reclaim_reason;
    f.replicas = d.memory.reclaim_target;
    d.reclaim_finished = f;
    d.memory.reclaim_started = 0;
    d.memory.reclaim_target = 0;
    d.memory.reclaim_reason.clear();
  }
}

// The workload's lending state after the decision, and its reason and message where the
// decision left them to the state.
void describe_state(const WorkloadObservation& w, int64_t serving, int64_t floor, int64_t needed, int64_t target,
                    std::string& reason, std::string& message, LendingDecision& d) {
  if (d.memory.reclaim_started > 0) {
    d.memory.state = STATE_RECLAIMING;
    if (message.empty()) message = "scaling the workload back to " + n(d.memory.reclaim_target) + " replicas";
  } else if (!w.opted_in && target >= serving) {
    d.memory.state = STATE_UNAVAILABLE;
  } else if (target < serving) {
    const bool gone = w.replicas == target && w.pods <= target;
    d.memory.state = gone ? STATE_LENT : STATE_SCALING_IN;
    if (message.empty())
      message = gone ? n(serving - target) + " of " + n(serving) + " replicas lent (demand needs " + n(needed) + ")"
                     : "scaling in from " + n(w.replicas) + " to " + n(target) +
                           " replicas; their GPUs are lent once the pods are gone";
  } else {
    d.memory.state = STATE_SERVING;
    if (reason == "Lending") {
      reason = serving <= floor ? "MinServingReplicas" : "DemandHigh";
      message = serving <= floor
                    ? "the workload has " + n(serving) + " replicas, not more than minServingReplicas " + n(floor)
                    : "demand needs all " + n(serving) + " replicas";
    }
  }
}

}  // namespace

int64_t demand_replicas(const DemandPolicy& demand, double signal, int64_t min_replicas, int64_t serving_replicas) {
  const double load = std::max(0.0, signal) * (1 + demand.headroom);
  switch (demand.sizing) {
    case DemandPolicy::Sizing::THRESHOLD:
      return signal < demand.threshold ? min_replicas : serving_replicas;
    case DemandPolicy::Sizing::REQUESTS_PER_REPLICA:
      if (!(demand.requests_per_replica > 0)) throw std::invalid_argument("requestsPerReplica must be > 0");
      return int64_t(std::ceil(load / demand.requests_per_replica - 1e-9));
    case DemandPolicy::Sizing::QUEUEING:
      return replicas_for_demand(demand.queueing, load);
  }
  return serving_replicas;
}

LendingDecision decide_lending(const LendingInputs& in) {
  if (in.policy == nullptr) throw std::invalid_argument("decide_lending: no policy");
  const LendingPolicy& p = *in.policy;
  const WorkloadObservation& w = in.workload;
  LendingDecision d;
  d.memory = in.memory;
  if (!w.exists) {
    d.memory = {};
    d.memory.state = STATE_UNAVAILABLE;
    d.reason = "WorkloadNotFound";
    d.message = "the workload to borrow from does not exist: create it or fix the entry's borrow.workload";
    return d;
  }
  // The replicas to give back: what it had before lending; an outside scale-out above it counts.
  int64_t serving = w.serving_replicas > 0 ? w.serving_replicas : w.replicas;
  const bool scaled_outside = w.replicas_set > 0 && w.replicas > w.replicas_set;
  serving = std::max(serving, w.replicas);
  const int64_t floor = std::min(p.min_serving_replicas, serving);

  // What demand needs, and whether lending is allowed now.
  DemandView demand = demand_view(in, floor, serving);
  Gate& gate = demand.gate;
  const int64_t needed = demand.needed;
  d.needed_replicas = gate.reason.empty() || gate.reason == "DemandHigh" ? needed : serving;
  if (gate.reason.empty()) gate = window_gate(p, in.now);
  if (gate.reason.empty() && w.unschedulable_pods > 0)
    gate = {"InferencePending", n(w.unschedulable_pods) + " workload pods are Pending for capacity"};

  int64_t target = gate.reason.empty() ? needed : serving;
  // Lent replicas come back only once demand eats into half the headroom; then to the full one.
  if (gate.reason.empty() && target > w.replicas && w.replicas >= demand.keep && w.replicas_set > 0)
    target = w.replicas;
  std::string reason = gate.reason.empty() ? "Lending" : gate.reason;
  std::string message = gate.message;
  if (scaled_outside) {
    target = std::max(target, w.replicas);
    if (reason == "Lending") reason = "WorkloadScaled";
    message = "spec.replicas was raised to " + n(w.replicas) + " outside the operator: kept as demand";
  }
  if (w.unschedulable_pods > 0) target = std::max(target, w.replicas);
  if (target < w.replicas) {
    if (d.memory.reclaim_started > 0) {
      target = w.replicas;  // no lending while replicas come back
    } else if (d.memory.last_change > 0 && in.now - d.memory.last_change < p.lend_cooldown_seconds) {
      message = "lending more waits for the cooldown: " +
                n(int64_t(p.lend_cooldown_seconds - (in.now - d.memory.last_change))) + " s left (lendCooldownSeconds)";
      target = w.replicas;
      reason = "Cooldown";
    }
  }
  track_reclaim(in, target, scaled_outside, reason, d);

  d.target_replicas = target;
  d.lendable_replicas = std::max<int64_t>(0, serving - std::max({target, w.replicas, w.pods}));
  const bool lent = target < serving || d.memory.reclaim_started > 0 || w.replicas < serving;
  d.serving_replicas = lent ? serving : 0;
  describe_state(w, serving, floor, needed, target, reason, message, d);
  d.reason = reason;
  d.message = message;
  return d;
}

}  // namespace qsync::lending
