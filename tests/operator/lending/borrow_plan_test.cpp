// File: tests/operator/lending/borrow_plan_test.cpp
// GPU accounting (allocatable minus other pods' requests; the job's own pods, finished and
// unbound pods hold nothing), borrowed ranks (budget, whole ranks, the entry's count, what the
// workload is owed left on the last nodes), a job's borrowing over two entries sharing nodes,
// and the elastic resize decision (wait below minRanks, shrink at once, grow after the cooldown).
#include <gtest/gtest.h>

#include "operator/lending/borrow_plan.h"
#include "operator/lending/elastic_resize.h"
#include "operator/lending/gpu_accounting.h"

namespace qsync::lending {
namespace {

TEST(GpuAccountingTest, FreeGpusCountOtherPodsOnly) {
  const std::vector<NodeObservation> nodes = {{"a", true, true, 4}, {"b", true, true, 4}, {"c", false, true, 4}, {"d", true, false, 0}};
  const std::vector<PodObservation> pods = {
      {"a", 1, false, false}, {"a", 1, true, false},  // finished: holds nothing
      {"b", 2, false, true},                            // the job's own
      {"", 1, false, false},                            // unbound
      {"b", 3, false, false}};
  const auto free = free_gpus(nodes, pods);
  EXPECT_EQ(free, (std::map<std::string, int64_t>{{"a", 3}, {"b", 1}}));  // c cordoned, d has no GPUs
}

TEST(GpuAccountingTest, BorrowedRanksRespectBudgetCountAndOwed) {
  const std::map<std::string, int64_t> free = {{"n1", 4}, {"n2", 4}, {"n3", 2}};
  EXPECT_EQ(borrowed_ranks({"n3", "n1", "n2"}, free, 10, 0, 1, 100), (std::map<std::string, int64_t>{{"n1", 4}, {"n2", 4}, {"n3", 2}}));
  EXPECT_EQ(borrowed_ranks({"n1", "n2", "n3"}, free, 5, 0, 1, 100), (std::map<std::string, int64_t>{{"n1", 4}, {"n2", 1}}));
  EXPECT_EQ(borrowed_ranks({"n1", "n2", "n3"}, free, 10, 0, 1, 3), (std::map<std::string, int64_t>{{"n1", 3}}));
  EXPECT_EQ(borrowed_ranks({"n1", "n2", "n3"}, free, 10, 0, 3, 100), (std::map<std::string, int64_t>{{"n1", 1}, {"n2", 1}}));
  // 3 GPUs owed to pending pods: off n3 (2) and n2 (1).
  EXPECT_EQ(borrowed_ranks({"n1", "n2", "n3"}, free, 10, 3, 1, 100), (std::map<std::string, int64_t>{{"n1", 4}, {"n2", 3}}));
  EXPECT_TRUE(borrowed_ranks({"x"}, free, 10, 0, 1, 100).empty());
}

TEST(BorrowPlanTest, EntriesNeverCountAGpuTwice) {
  LendingPolicy p;
  p.min_serving_replicas = 1;
  WorkloadObservation w;
  w.exists = w.opted_in = true;
  w.replicas = w.ready_replicas = w.pods = 1;
  w.serving_replicas = 4;
  w.replicas_set = 1;
  BorrowEntry a{"a", &p, w, std::nullopt, {}, {"n1"}, 1, 1, 8};
  BorrowEntry b = a;
  b.entry = "b";
  // Both lend 3 replicas on n1, which has 4 free GPUs: the first takes 3, the second 1.
  const std::vector<BorrowPlan> plans = plan_borrowing({a, b}, {{"n1", 4}}, 1781222400);
  ASSERT_EQ(plans.size(), 2u);
  EXPECT_EQ(plans[0].borrowed_gpus, 3);
  EXPECT_EQ(plans[1].borrowed_gpus, 1);
  EXPECT_EQ(plans[0].decision.lendable_replicas, 3);
}

TEST(BorrowPlanTest, AReclaimReleasesTheOwedGpusAtOnce) {
  LendingPolicy p;
  p.min_serving_replicas = 1;
  p.windows = {lending_window("0 20 * * *", "0 7 * * *", "UTC")};
  WorkloadObservation w;
  w.exists = w.opted_in = true;
  w.replicas = w.ready_replicas = w.pods = 1;
  w.serving_replicas = 4;
  w.replicas_set = 1;
  const BorrowEntry e{"t4", &p, w, std::nullopt, {}, {"n1", "n2"}, 1, 1, 8};
  const double night = 1781222400 + 2 * 3600, day = 1781222400 + 12 * 3600;
  // Free GPUs without the job: the 3 lent on n2 (n1 keeps the serving pod's).
  EXPECT_EQ(plan_borrowing({e}, {{"n1", 1}, {"n2", 3}}, night)[0].borrowed_gpus, 3);
  const BorrowPlan reclaim = plan_borrowing({e}, {{"n1", 1}, {"n2", 3}}, day)[0];
  EXPECT_EQ(reclaim.decision.target_replicas, 4);
  EXPECT_EQ(reclaim.borrowed_gpus, 0);
}

RankSlot slot(const std::string& node, const std::string& entry = "t4") { return {"inference", entry, node, "gpu-t4", 1}; }

TEST(ElasticResizeTest, WaitReplanShrinkAndGrow) {
  const RankSlot train{"training", "a100", "train-0", "gpu-a100", 1};
  ResizeInputs in;
  in.min_ranks = 2;
  in.grow_cooldown_seconds = 300;
  in.now = 1000;
  in.offered = {train};
  EXPECT_EQ(decide_resize(in).action, ResizeAction::WAIT);
  EXPECT_EQ(decide_resize(in).reason, "BelowMinRanks");
  in.offered = {train, slot("n1")};
  EXPECT_EQ(decide_resize(in).action, ResizeAction::REPLAN);  // nothing planned yet
  in.current = {slot("n1"), train};
  in.current_has_pods = true;
  EXPECT_EQ(decide_resize(in).action, ResizeAction::NONE);  // order does not matter
  // A planned slot is gone: shrink at once, even right after the last resize.
  in.last_resize = 990;
  in.offered = {train, slot("n2")};
  ResizeDecision d = decide_resize(in);
  EXPECT_EQ(d.action, ResizeAction::RESIZE);
  EXPECT_EQ(d.reason, "PoolShrank");
  EXPECT_NE(d.message.find("t4@n1"), std::string::npos) << d.message;
  // Only new slots: after the cooldown.
  in.offered = {train, slot("n1"), slot("n2")};
  d = decide_resize(in);
  EXPECT_EQ(d.action, ResizeAction::NONE);
  EXPECT_NE(d.message.find("growCooldownSeconds"), std::string::npos) << d.message;
  in.now = 1290;
  EXPECT_EQ(decide_resize(in).action, ResizeAction::RESIZE);
  EXPECT_EQ(decide_resize(in).reason, "PoolGrew");
  EXPECT_EQ(decide_resize(in).to_ranks, 3);
  // No pods of the current attempt yet: plan again, nothing to stop.
  in.current_has_pods = false;
  EXPECT_EQ(decide_resize(in).action, ResizeAction::REPLAN);
}

TEST(ElasticResizeTest, GrowthMustPay) {
  EXPECT_TRUE(growth_pays(0, 1.0, 0.05));  // nothing planned
  EXPECT_TRUE(growth_pays(1.0, 0.9, 0.05));
  EXPECT_FALSE(growth_pays(1.0, 0.97, 0.05));
  EXPECT_FALSE(growth_pays(1.0, 1.2, 0.05));  // more ranks, slower: communication wins
  EXPECT_FALSE(growth_pays(1.0, 0, 0.05));
  EXPECT_TRUE(growth_pays(1.0, 1.5, -1));  // minGrowthPercent -100: always
  EXPECT_FALSE(growth_pays(1.0, 1.5, -0.2));
}

}  // namespace
}  // namespace qsync::lending
