// File: tests/operator/lending/lending_decision_test.cpp
// The lending decision as a table of situations: a missing or not opted-in workload, a window
// that opens (scale in; GPUs lent only once the pods are gone) and closes (reclaim before the
// close, timed until Ready, misses reported), demand sized by M/M/c, by requests per replica
// and by a threshold, a stale or failing signal, the lending cooldown (which never delays a
// reclaim), pods Pending for capacity, an outside scale-out, and never below minServingReplicas.
#include <gtest/gtest.h>

#include "operator/lending/lending_decision.h"

namespace qsync::lending {
namespace {

constexpr double T0 = 1781222400;  // 2026-06-12T00:00:00Z

WorkloadObservation serving(int64_t replicas) {
  WorkloadObservation w;
  w.exists = true;
  w.opted_in = true;
  w.replicas = w.ready_replicas = w.pods = replicas;
  return w;
}

LendingPolicy always(int64_t min_serving) {
  LendingPolicy p;
  p.min_serving_replicas = min_serving;
  p.reclaim_grace_seconds = 120;
  p.lend_cooldown_seconds = 600;
  return p;
}

DemandPolicy demand_of(DemandPolicy::Sizing sizing, double threshold, double requests_per_replica, double headroom = 0,
                       double max_age = 120) {
  DemandPolicy d;
  d.sizing = sizing;
  d.threshold = threshold;
  d.requests_per_replica = requests_per_replica;
  d.headroom = headroom;
  d.max_sample_age_seconds = max_age;
  return d;
}

LendingDecision decide(const LendingPolicy& p, const WorkloadObservation& w, double now, LendingMemory memory = {},
                       std::optional<DemandSample> demand = std::nullopt) {
  LendingInputs in;
  in.policy = &p;
  in.workload = w;
  in.now = now;
  in.memory = memory;
  in.demand = demand;
  return decide_lending(in);
}

TEST(LendingDecisionTest, MissingOrNotOptedInLendsNothing) {
  const LendingPolicy p = always(1);
  WorkloadObservation w;
  LendingDecision d = decide(p, w, T0);
  EXPECT_EQ(d.reason, "WorkloadNotFound");
  EXPECT_EQ(d.memory.state, STATE_UNAVAILABLE);
  EXPECT_EQ(d.lendable_replicas, 0);
  w = serving(4);
  w.opted_in = false;
  d = decide(p, w, T0);
  EXPECT_EQ(d.reason, "NotOptedIn");
  EXPECT_EQ(d.target_replicas, 4);
  EXPECT_EQ(d.lendable_replicas, 0);
  EXPECT_NE(d.message.find("qsync.dev/lendable"), std::string::npos) << d.message;
}

TEST(LendingDecisionTest, ScaleInLendsOnlyWhatIsGone) {
  const LendingPolicy p = always(1);
  // 4 replicas serving: scale in to 1; nothing lent until the pods are gone.
  LendingDecision d = decide(p, serving(4), T0);
  EXPECT_EQ(d.target_replicas, 1);
  EXPECT_TRUE(d.lend_started);
  EXPECT_EQ(d.lendable_replicas, 0);
  EXPECT_EQ(d.serving_replicas, 4);
  EXPECT_EQ(d.memory.state, STATE_SCALING_IN);
  // spec.replicas is 1 now, two pods still terminating: one replica's GPUs are free.
  WorkloadObservation w = serving(1);
  w.serving_replicas = 4;
  w.replicas_set = 1;
  w.pods = 3;
  d = decide(p, w, T0 + 10, d.memory);
  EXPECT_FALSE(d.lend_started);
  EXPECT_EQ(d.lendable_replicas, 1);
  EXPECT_EQ(d.memory.state, STATE_SCALING_IN);
  w.pods = 1;
  d = decide(p, w, T0 + 20, d.memory);
  EXPECT_EQ(d.lendable_replicas, 3);
  EXPECT_EQ(d.memory.state, STATE_LENT);
  EXPECT_EQ(d.memory.last_change, T0) << "the scale-in is the last change";
}

TEST(LendingDecisionTest, WindowClosingReclaimsWithinGraceAndTimesIt) {
  LendingPolicy p = always(1);
  p.windows = {lending_window("0 20 * * *", "0 7 * * *", "UTC")};
  const double night = T0 + 3 * 3600;  // 03:00
  WorkloadObservation lent = serving(1);
  lent.serving_replicas = 4;
  lent.replicas_set = 1;
  LendingDecision d = decide(p, lent, night);
  EXPECT_EQ(d.target_replicas, 1);
  EXPECT_EQ(d.lendable_replicas, 3);
  // 06:59: the window closes in 60 s < grace 120 s: reclaim now, the GPUs go back at once.
  const double closing = T0 + 7 * 3600 - 60;
  d = decide(p, lent, closing, d.memory);
  EXPECT_EQ(d.target_replicas, 4);
  EXPECT_EQ(d.lendable_replicas, 0);
  ASSERT_TRUE(d.reclaim_started.has_value());
  EXPECT_EQ(*d.reclaim_started, "WindowClosing");
  EXPECT_EQ(d.memory.state, STATE_RECLAIMING);
  // Scaled out, two of four Ready: still reclaiming; all four: done in 45 s, within grace.
  WorkloadObservation back = serving(4);
  back.serving_replicas = 4;
  back.replicas_set = 4;
  back.ready_replicas = 2;
  d = decide(p, back, closing + 30, d.memory);
  EXPECT_FALSE(d.reclaim_finished.has_value());
  back.ready_replicas = 4;
  d = decide(p, back, closing + 45, d.memory);
  ASSERT_TRUE(d.reclaim_finished.has_value());
  EXPECT_DOUBLE_EQ(d.reclaim_finished->seconds, 45);
  EXPECT_TRUE(d.reclaim_finished->within_grace);
  EXPECT_EQ(d.reclaim_finished->reason, "WindowClosing");
  EXPECT_EQ(d.memory.state, STATE_SERVING);
  EXPECT_EQ(d.serving_replicas, 0) << "nothing lent: the annotation goes";
  EXPECT_EQ(d.memory.reclaim_started, 0);
}

TEST(LendingDecisionTest, SlowReclaimIsReportedAsAMiss) {
  const LendingPolicy p = always(1);
  LendingMemory m;
  m.reclaim_started = T0;
  m.reclaim_target = 3;
  m.reclaim_reason = "DemandHigh";
  m.state = STATE_RECLAIMING;
  WorkloadObservation w = serving(3);
  w.serving_replicas = 3;
  w.replicas_set = 3;
  LendingDecision d = decide(p, w, T0 + 500, m, DemandSample{});
  ASSERT_TRUE(d.reclaim_finished.has_value());
  EXPECT_FALSE(d.reclaim_finished->within_grace);
  EXPECT_DOUBLE_EQ(d.reclaim_finished->seconds, 500);
}

TEST(LendingDecisionTest, QueueingDemandSizesTheReplicas) {
  LendingPolicy p = always(2);
  DemandPolicy demand;
  demand.sizing = DemandPolicy::Sizing::QUEUEING;
  demand.queueing = {.service_seconds = 0.5, .servers_per_replica = 4, .wait_target_seconds = 0.1, .wait_quantile = 0.99};
  demand.headroom = 0.25;
  p.demand = demand;
  const int64_t expected = replicas_for_demand(demand.queueing, 40 * 1.25);
  LendingDecision d = decide(p, serving(32), T0, {}, DemandSample{true, 40, T0, ""});
  EXPECT_EQ(d.needed_replicas, expected);
  EXPECT_EQ(d.target_replicas, expected);
  EXPECT_LT(expected, 32);
  EXPECT_GT(expected, 2);
  // No demand at all: never below minServingReplicas. Demand beyond the workload: all of it.
  EXPECT_EQ(decide(p, serving(32), T0, {}, DemandSample{true, 0, T0, ""}).target_replicas, 2);
  EXPECT_EQ(decide(p, serving(32), T0, {}, DemandSample{true, 1e4, T0, ""}).target_replicas, 32);
}

TEST(LendingDecisionTest, RequestsPerReplicaAndThresholdDemand) {
  LendingPolicy p = always(1);
  p.demand = demand_of(DemandPolicy::Sizing::REQUESTS_PER_REPLICA, 0, 10);
  EXPECT_EQ(decide(p, serving(8), T0, {}, DemandSample{true, 31, T0, ""}).target_replicas, 4);
  p.demand = demand_of(DemandPolicy::Sizing::THRESHOLD, 50, 0);
  EXPECT_EQ(decide(p, serving(8), T0, {}, DemandSample{true, 49, T0, ""}).target_replicas, 1);
  const LendingDecision high = decide(p, serving(8), T0, {}, DemandSample{true, 50, T0, ""});
  EXPECT_EQ(high.target_replicas, 8);
  EXPECT_EQ(high.reason, "DemandHigh");
}

TEST(LendingDecisionTest, StaleOrFailedDemandReclaims) {
  LendingPolicy p = always(1);
  p.demand = demand_of(DemandPolicy::Sizing::THRESHOLD, 50, 0, 0, 60);
  WorkloadObservation lent = serving(1);
  lent.serving_replicas = 4;
  lent.replicas_set = 1;
  LendingDecision d = decide(p, lent, T0, {}, DemandSample{true, 10, T0 - 61, ""});
  EXPECT_EQ(d.target_replicas, 4);
  EXPECT_EQ(d.reason, "DemandUnknown");
  ASSERT_TRUE(d.reclaim_started.has_value());
  d = decide(p, lent, T0, {}, DemandSample{false, 0, T0, "prometheus: connection refused"});
  EXPECT_NE(d.message.find("connection refused"), std::string::npos) << d.message;
  EXPECT_EQ(decide(p, lent, T0, {}, std::nullopt).target_replicas, 4);
}

TEST(LendingDecisionTest, CooldownDelaysLendingMoreButNeverAReclaim) {
  LendingPolicy p = always(1);
  p.demand = demand_of(DemandPolicy::Sizing::REQUESTS_PER_REPLICA, 0, 10);
  WorkloadObservation w = serving(4);
  w.serving_replicas = 8;
  w.replicas_set = 4;
  LendingMemory m;
  m.last_change = T0;
  // Demand fell to 2 replicas' worth 100 s after the last change: wait (cooldown 600 s).
  LendingDecision d = decide(p, w, T0 + 100, m, DemandSample{true, 15, T0 + 100, ""});
  EXPECT_EQ(d.target_replicas, 4);
  EXPECT_EQ(d.reason, "Cooldown");
  EXPECT_EQ(decide(p, w, T0 + 601, m, DemandSample{true, 15, T0 + 601, ""}).target_replicas, 2);
  // Demand rose to 6 replicas' worth: at once.
  d = decide(p, w, T0 + 100, m, DemandSample{true, 55, T0 + 100, ""});
  EXPECT_EQ(d.target_replicas, 6);
  EXPECT_TRUE(d.reclaim_started.has_value());
  EXPECT_EQ(d.lendable_replicas, 2);
}

TEST(LendingDecisionTest, PendingPodsAndOutsideScaleOutReclaim) {
  const LendingPolicy p = always(1);
  WorkloadObservation w = serving(2);
  w.serving_replicas = 4;
  w.replicas_set = 2;
  w.pods = 3;  // a third pod was created (someone scaled to 3) and waits for capacity
  w.replicas = 3;
  w.unschedulable_pods = 1;
  LendingDecision d = decide(p, w, T0);
  EXPECT_GE(d.target_replicas, 3);
  EXPECT_EQ(d.lendable_replicas, 4 - d.target_replicas);
  ASSERT_TRUE(d.reclaim_started.has_value());
  EXPECT_EQ(*d.reclaim_started, "InferencePending");
  // Scaled to 6 outside the operator: 6 is the new baseline to give back.
  WorkloadObservation big = serving(6);
  big.serving_replicas = 4;
  big.replicas_set = 2;
  big.ready_replicas = 2;
  d = decide(p, big, T0);
  EXPECT_EQ(d.target_replicas, 6);
  EXPECT_EQ(d.serving_replicas, 6);
  EXPECT_EQ(d.reason, "WorkloadScaled");
  ASSERT_TRUE(d.reclaim_started.has_value()) << "its new pods wait for the job's GPUs";
  EXPECT_EQ(*d.reclaim_started, "WorkloadScaled");
  EXPECT_EQ(d.lendable_replicas, 0);
}

TEST(LendingDecisionTest, NothingToLendAtTheMinimum) {
  const LendingPolicy p = always(3);
  const LendingDecision d = decide(p, serving(3), T0);
  EXPECT_EQ(d.target_replicas, 3);
  EXPECT_EQ(d.lendable_replicas, 0);
  EXPECT_EQ(d.reason, "MinServingReplicas");
  EXPECT_EQ(d.memory.state, STATE_SERVING);
  EXPECT_EQ(d.serving_replicas, 0);
}

}  // namespace
}  // namespace qsync::lending
