// File: operator/lending/lending_decision.h
// The lending decision for one inference workload a HybridTrainingJob borrows from: a pure,
// level-triggered function of what is observed (the workload's replicas and pods, a demand
// sample, the clock, and what the job's status remembers) to what should be (the workload's
// replicas, how many replicas' worth of GPUs the job may use, the entry's lending state, and
// the events to report). The reconciler and the simulation (bench/lending_sim) both call it; the
// reconciler reads the observation from the API, the simulation from its model of a cluster.
//
// The rules, per decision:
//   serving    = the replicas the workload had before lending (the qsync.dev/serving-replicas
//                annotation the operator wrote when it first scaled in; else spec.replicas).
//                Someone else scaling the workload above what the operator set raises it.
//   needed     = what demand needs, in [minServingReplicas, serving]: the demand sizing
//                (threshold: serving while the signal is at or above it, else the minimum;
//                queueing: M/M/c for the wait target; requestsPerReplica: ceil(rate / target)),
//                with headroom; no demand policy: minServingReplicas.
//   allowed    = opted in (the workload's annotation), inside a window when windows are given
//                (and more than reclaimGraceSeconds before it closes, so the replicas are back
//                by the close), demand fresh (a missing or stale sample reclaims), no workload
//                pod Pending for capacity.
//   target     = allowed ? needed : serving. Scaling in (lending more) waits lendCooldownSeconds
//                after the last change; scaling out (a reclaim) never waits. Hysteresis: while
//                lending, a rise in demand reclaims only once the replicas no longer cover it
//                at half the headroom, and then back to the full headroom (each reclaim
//                resizes the job).
//   lendable   = serving - max(target, spec.replicas, the workload's pods): only replicas whose
//                pods are gone lend their GPUs; a reclaim takes them back at once.
// A reclaim starts when the target rises above spec.replicas and ends when readyReplicas reach
// the reclaim's target with no pod Pending; its seconds are compared with reclaimGraceSeconds.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "operator/lending/lending_window.h"
#include "operator/lending/queueing_model.h"

namespace qsync::lending {

// Lending states, as status.lending[].state shows them.
inline constexpr const char* STATE_SERVING = "Serving";        // nothing lent
inline constexpr const char* STATE_SCALING_IN = "ScalingIn";   // replicas going; their GPUs not yet lent
inline constexpr const char* STATE_LENT = "Lent";              // GPUs lent to the job
inline constexpr const char* STATE_RECLAIMING = "Reclaiming";  // replicas coming back
inline constexpr const char* STATE_UNAVAILABLE = "Unavailable";  // no workload, not opted in

// How demand sizes the serving replicas.
struct DemandPolicy {
  enum class Sizing { THRESHOLD, QUEUEING, REQUESTS_PER_REPLICA };
  Sizing sizing = Sizing::THRESHOLD;
  double threshold = 0;             // THRESHOLD: lend while the signal is below it
  QueueingTarget queueing;          // QUEUEING: the signal is the arrival rate (requests/s)
  double requests_per_replica = 0;  // REQUESTS_PER_REPLICA: the signal is requests/s
  double headroom = 0.2;            // demand is sized as signal * (1 + headroom)
  double max_sample_age_seconds = 120;  // an older sample counts as missing
};

struct LendingPolicy {
  int64_t min_serving_replicas = 1;
  std::vector<LendingWindow> windows;  // empty: any time (demand permitting)
  std::optional<DemandPolicy> demand;  // none: lend down to min_serving_replicas when allowed
  double reclaim_grace_seconds = 300;
  double lend_cooldown_seconds = 300;
};

// The workload as observed (the reconciler fills it from the Deployment or StatefulSet and its
// pods; the simulation from its model).
struct WorkloadObservation {
  bool exists = false;
  bool opted_in = false;           // annotation qsync.dev/lendable: "true"
  int64_t replicas = 0;            // spec.replicas
  int64_t ready_replicas = 0;      // status.readyReplicas
  int64_t pods = 0;                // its pods not yet gone (terminating ones included)
  int64_t unschedulable_pods = 0;  // Pending with PodScheduled=False, reason Unschedulable
  int64_t serving_replicas = 0;    // annotation qsync.dev/serving-replicas (0: absent)
  int64_t replicas_set = 0;        // annotation qsync.dev/lending-replicas: what the operator last set (0: absent)
};

struct DemandSample {
  bool ok = false;
  double value = 0;
  double at = 0;      // when it was sampled (seconds since the epoch)
  std::string error;  // !ok: why (the query failed, no series, ...)
};

// What the job's status remembers of the entry between decisions (status.lending[]).
struct LendingMemory {
  std::string state;            // "" before the first decision
  double last_change = 0;       // when the operator last changed the workload's replicas
  double reclaim_started = 0;   // 0: no reclaim in progress
  int64_t reclaim_target = 0;   // the replicas the reclaim waits for
  std::string reclaim_reason;
  bool operator==(const LendingMemory&) const = default;
};

struct LendingInputs {
  const LendingPolicy* policy = nullptr;
  WorkloadObservation workload;
  std::optional<DemandSample> demand;  // required when policy->demand is set
  double now = 0;
  LendingMemory memory;
};

struct FinishedReclaim {
  double seconds = 0;
  bool within_grace = true;
  std::string reason;
  int64_t replicas = 0;
};

struct LendingDecision {
  int64_t target_replicas = 0;     // write spec.replicas when it differs
  int64_t serving_replicas = 0;    // keep as the annotation; 0: remove it (nothing lent)
  int64_t lendable_replicas = 0;   // replicas' worth of GPUs the job may use now
  int64_t needed_replicas = 0;     // what demand needs (for status and the simulation)
  LendingMemory memory;            // to remember
  std::string reason, message;     // why (the state's reason; the message says what to do)
  std::optional<std::string> reclaim_started;  // a reclaim began now, for this reason
  std::optional<FinishedReclaim> reclaim_finished;
  bool lend_started = false;       // the operator scales in now
};

// Throws std::invalid_argument when inputs.policy is null.
LendingDecision decide_lending(const LendingInputs& inputs);

// The replicas demand needs under the policy (before clamping to [min, serving]); for
// THRESHOLD: serving at or above the threshold, else min. Throws std::invalid_argument when
// the sizing cannot be met (e.g. a non-positive service time).
int64_t demand_replicas(const DemandPolicy& demand, double signal, int64_t min_replicas, int64_t serving_replicas);

}  // namespace qsync::lending
