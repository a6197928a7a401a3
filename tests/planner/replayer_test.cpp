// File: tests/planner/replayer_test.cpp
// Tests of planner/replayer.h against hand-computed small graphs: gradient buckets, the first
// bucket's all-reduce overlapping backward, a slow rank delaying the sync while the fast one
// waits the difference, one rank without sync, memory = static + saved (scaled to the local
// batch) + weight copies, the profile's step residual (and its FP32 step replayed in its world),
// the gradient copies into and out of the buckets, planned precisions' costs, and the errors for
// a missing precision.
#include "planner/replayer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "planner/replay_timeline.h"
#include "tests/planner/planner_test_support.h"
#include "tests/planner/synthetic_job.h"

namespace qsync {
namespace {

using qsync::testing::blank_profile;
using qsync::testing::chain_model;
using qsync::testing::cost;
using qsync::testing::expect_error;

// flatten -> fc0 (16 -> 8: 136 parameters, 544 bytes) -> fc1 (8 -> 4: 36 parameters, 144 bytes).
const ModelDesc& two_layer() {
  static const ModelDesc m = chain_model({8, 4}, "two-layer");
  return m;
}

// Times scaled by `k`: fc0 forward 1, backward 4; fc1 forward 2, backward 3; optimizer 0.5.
DeviceProfile two_layer_profile(double k, int64_t batch = 4) {
  DeviceProfile p = blank_profile(two_layer(), k == 1 ? "fast" : "slow", batch);
  p.gemm_layers["fc0"][LayerPrecision::FP32] = cost(1 * k, 4 * k, 1000, 0);
  p.gemm_layers["fc0"][LayerPrecision::INT8] = cost(0.5 * k, 2 * k, 250, 136);
  p.gemm_layers["fc1"][LayerPrecision::FP32] = cost(2 * k, 3 * k, 400, 0);
  p.optimizer_seconds = 0.5;
  p.static_bytes = 10000;
  return p;
}

CommProfile comm(double alpha, double beta) {
  CommProfile c;
  c.alpha = alpha;
  c.beta = beta;
  return c;
}

ReplayRank rank_of(const DeviceProfile& p, int64_t batch, LayerPrecision fc0 = LayerPrecision::FP32) {
  ReplayRank r;
  r.profile = &p;
  r.plan = plan_uniform(two_layer(), LayerPrecision::FP32);
  r.plan.layers["fc0"] = fc0;
  r.plan.local_batch = batch;
  return r;
}

TEST(Replayer, BucketsFollowTheWorkersRuleAtLeafGranularity) {
  // Reverse forward order; a new bucket once the current one holds >= bucket_bytes.
  const std::vector<GradientBucket> b = gradient_buckets({0, 136, 0, 36}, 144);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].bytes, 144);
  EXPECT_EQ(b[0].first_leaf, 3u);
  EXPECT_EQ(b[1].bytes, 544);
  EXPECT_EQ(b[1].first_leaf, 1u);
  const std::vector<GradientBucket> one = gradient_buckets({0, 136, 0, 36}, 25ll << 20);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].bytes, 688);
  EXPECT_EQ(one[0].first_leaf, 1u);
  EXPECT_EQ(leaf_parameter_count(*model_leaf_layers(two_layer())[1]), 136);
}

TEST(Replayer, FirstBucketsAllReduceOverlapsBackward) {
  const DeviceProfile p = two_layer_profile(1);
  // Buckets of 144 bytes: fc1's gradients (144 B) alone, then fc0's (544 B).
  // comm: 1 + 0.001/byte -> 1.144 s and 1.544 s.
  const StepPrediction s = replay_step(two_layer(), {rank_of(p, 4), rank_of(p, 4)}, comm(1, 0.001), 144);
  // forward ends at 3; fc1's backward ends at 6: bucket 0 runs 6..7.144, inside fc0's backward
  // (6..10); bucket 1 is ready at 10 and runs 10..11.544; the optimizer 11.544..12.044; the
  // step's stats all-reduce (32 bytes: 1.032 s) 12.044..13.076.
  ASSERT_EQ(s.ranks.size(), 2u);
  for (const RankPrediction& r : s.ranks) {
    EXPECT_DOUBLE_EQ(r.backward_end_seconds, 10);
    EXPECT_DOUBLE_EQ(r.compute_seconds, 10.5);
    EXPECT_NEAR(r.wait_seconds, 1.544, 1e-12);
    EXPECT_NEAR(r.step_seconds, 13.076, 1e-12);
  }
  EXPECT_NEAR(s.allreduce_end_seconds, 11.544, 1e-12);
  EXPECT_NEAR(s.step_seconds, 13.076, 1e-12);
  // Slow enough a network that bucket 1 queues behind bucket 0: 6 + 5 = 11 > 10, then 11 + 5.
  const StepPrediction q = replay_step(two_layer(), {rank_of(p, 4), rank_of(p, 4)}, comm(5, 0), 144);
  EXPECT_NEAR(q.allreduce_end_seconds, 16, 1e-12);
  EXPECT_NEAR(q.ranks[0].wait_seconds, 6, 1e-12);
  EXPECT_NEAR(q.step_seconds, 16.5 + 5, 1e-12);  // + the stats all-reduce
}

TEST(Replayer, SlowRankDelaysTheSyncAndTheFastOneWaitsTheDifference) {
  const DeviceProfile fast = two_layer_profile(1), slow = two_layer_profile(2);
  const StepPrediction s = replay_step(two_layer(), {rank_of(fast, 4), rank_of(slow, 4)}, comm(1, 0.001), 144);
  // slow: forward ends at 6, fc1's backward at 12, fc0's at 20. Bucket 0 ready at max(6, 12) = 12,
  // runs to 13.144; bucket 1 ready at max(10, 20) = 20, runs to 21.544.
  EXPECT_NEAR(s.allreduce_end_seconds, 21.544, 1e-12);
  EXPECT_DOUBLE_EQ(s.ranks[1].backward_end_seconds, 20);
  EXPECT_NEAR(s.ranks[1].wait_seconds, 1.544, 1e-12);
  EXPECT_NEAR(s.ranks[0].wait_seconds, 11.544, 1e-12);
  EXPECT_NEAR(s.ranks[0].wait_seconds - s.ranks[1].wait_seconds,
              s.ranks[1].backward_end_seconds - s.ranks[0].backward_end_seconds, 1e-12);
  // Both leave the step's stats all-reduce (1.032 s) together, after the slow rank's optimizer.
  EXPECT_NEAR(s.ranks[0].step_seconds, 23.076, 1e-12);
  EXPECT_NEAR(s.ranks[1].step_seconds, 23.076, 1e-12);
  EXPECT_DOUBLE_EQ(s.ranks[1].compute_seconds, 20.5);
  EXPECT_NEAR(s.step_seconds, 23.076, 1e-12);
}

// A straggler's all-reduce: its peers, waiting since they arrived, have sent their parts, so it
// costs the measured late cost once they waited as long as the all-reduce takes together, and
// between the two for a shorter lead. A bucket queued behind the one before finds every rank
// waiting for the link, and takes the time together.
TEST(Replayer, ALateArrivalsAllReduceCostsTheLateCostByItsLead) {
  const DeviceProfile fast = two_layer_profile(1), slow = two_layer_profile(2);
  CommProfile c = comm(1, 0.001);  // together: 1.144 s (144 B) and 1.544 s (544 B)
  c.late_alpha = 0.5;
  c.late_beta = 0.0005;  // late: 0.572 and 0.772
  // Buckets ready at 12 and 20 on the slow rank, 6 and 10 on the fast one: leads of 6 and of
  // 20 - max(12.572, 10), both longer than together.
  EXPECT_NEAR(replay_step(two_layer(), {rank_of(fast, 4), rank_of(slow, 4)}, c, 144).allreduce_end_seconds,
              20 + 0.772, 1e-12);
  EXPECT_NEAR(c.seconds_after(544, 0.0), 1.544, 1e-12);
  EXPECT_NEAR(c.seconds_after(544, 0.772), 1.544 - 0.772 * 0.5, 1e-12);
  EXPECT_NEAR(c.seconds_after(544, 5.0), 0.772, 1e-12);
  // A lead of 0.5 s (the second rank's residual): 1.144 - 0.572 * 0.5 / 1.144, then 1.544 - 0.25.
  DeviceProfile later = two_layer_profile(1);
  later.step_overhead_seconds = 0.5;
  EXPECT_NEAR(replay_step(two_layer(), {rank_of(fast, 4), rank_of(later, 4)}, c, 144).allreduce_end_seconds,
              10.5 + 1.294, 1e-12);
  // Ranks arriving together, or a profile that did not measure it: the time together.
  EXPECT_NEAR(replay_step(two_layer(), {rank_of(fast, 4), rank_of(fast, 4)}, c, 144).allreduce_end_seconds, 11.544,
              1e-12);
  EXPECT_NEAR(replay_step(two_layer(), {rank_of(fast, 4), rank_of(slow, 4)}, comm(1, 0.001), 144).allreduce_end_seconds,
              21.544, 1e-12);
  // 15 s together, 1 s late: bucket 0 after a lead of 6 takes 15 - 14 * 6 / 15 = 9.4 (to 21.4);
  // bucket 1, ready at 20, queues behind it and takes 15.
  CommProfile slow_link = comm(15, 0);
  slow_link.late_alpha = 1;
  EXPECT_NEAR(replay_step(two_layer(), {rank_of(fast, 4), rank_of(slow, 4)}, slow_link, 144).allreduce_end_seconds,
              21.4 + 15, 1e-12);
}

TEST(Replayer, OneRankDoesNotSynchronize) {
  const DeviceProfile p = two_layer_profile(1);
  const StepPrediction s = replay_step(two_layer(), {rank_of(p, 4)}, comm(1, 0.001), 144);
  EXPECT_DOUBLE_EQ(s.step_seconds, 10.5);
  EXPECT_DOUBLE_EQ(s.ranks[0].wait_seconds, 0);
  EXPECT_DOUBLE_EQ(s.allreduce_end_seconds, 0);
}

TEST(Replayer, GradientCopiesGoInTheBackwardAndBeforeTheOptimizer) {
  DeviceProfile p = two_layer_profile(1);
  p.casts[{Precision::FP32, Precision::FP32}] = LinearCost{0.01, 0};  // 0.01 s per element copied
  const StepPrediction s = replay_step(two_layer(), {rank_of(p, 4), rank_of(p, 4)}, comm(1, 0.001), 144);
  // Bucket 0 (fc1: 36 elements) is copied in when fc1's backward ends: 6 + 0.36, and all-reduced
  // 6.36..7.504. fc0's backward 6.36..10.36, its bucket's copy (136 elements) to 11.72: bucket 1
  // runs 11.72..13.264. Then all 172 gradients back out (1.72 s) to 14.984, the optimizer to
  // 15.484, and the stats all-reduce (1.032 s) to 16.516.
  for (const RankPrediction& r : s.ranks) {
    EXPECT_NEAR(r.backward_end_seconds, 11.72, 1e-12);
    EXPECT_NEAR(r.compute_seconds, 12.22, 1e-12);
    EXPECT_NEAR(r.wait_seconds, 1.544 + 1.72, 1e-12);  // the worker's wait includes the copy out
    EXPECT_NEAR(r.optimizer_seconds, 0.5, 1e-12);
  }
  EXPECT_NEAR(s.allreduce_end_seconds, 13.264, 1e-12);
  EXPECT_NEAR(s.step_seconds, 16.516, 1e-12);
  // One rank has no buckets and copies nothing.
  EXPECT_DOUBLE_EQ(replay_step(two_layer(), {rank_of(p, 4)}, comm(1, 0.001), 144).step_seconds, 10.5);
  const GradientCopies c = gradient_copy_seconds(p, gradient_buckets({0, 136, 0, 36}, 144));
  ASSERT_EQ(c.into_bucket.size(), 2u);
  EXPECT_NEAR(c.into_bucket[0], 0.36, 1e-12);
  EXPECT_NEAR(c.into_bucket[1], 1.36, 1e-12);
  EXPECT_NEAR(c.out_of_buckets, 1.72, 1e-12);
}

TEST(Replayer, TheStatsAllReduceCostsTheMeasuredLateArrivalWhenLarger) {
  const DeviceProfile p = two_layer_profile(1);
  CommProfile c = comm(1, 0.001);
  c.late_sync_seconds = 2.5;  // above comm.seconds(32 B) = 1.032
  EXPECT_NEAR(replay_step(two_layer(), {rank_of(p, 4), rank_of(p, 4)}, c, 144).step_seconds, 12.044 + 2.5, 1e-12);
  c.late_sync_seconds = 0.5;  // below it: the all-reduce's own cost
  EXPECT_NEAR(replay_step(two_layer(), {rank_of(p, 4), rank_of(p, 4)}, c, 144).step_seconds, 13.076, 1e-12);
  EXPECT_EQ(step_stats_seconds(c, 1), 0);
}

TEST(Replayer, ExpectedMaxOfNormalsIsClarksMoments) {
  EXPECT_NEAR(expected_max_of_normals({0, 0}, {1, 1}), 1 / std::sqrt(M_PI), 1e-12);  // E max of two N(0,1)
  EXPECT_NEAR(expected_max_of_normals({10, 0}, {1, 1}), 10, 1e-9);                  // far apart: the larger
  EXPECT_DOUBLE_EQ(expected_max_of_normals({5, 7, 6}, {0, 0, 0}), 7);
  EXPECT_NEAR(expected_max_of_normals({3}, {2}), 3, 1e-12);
  // Three equal N(0,1): exactly 1.5 / sqrt(pi) = 0.8463; Clark's one-at-a-time folding gives 0.8453.
  EXPECT_NEAR(expected_max_of_normals({0, 0, 0}, {1, 1, 1}), 1.5 / std::sqrt(M_PI), 2e-3);
}

TEST(Replayer, StepJitterLengthensABalancedStep) {
  DeviceProfile p = two_layer_profile(1);
  p.step_jitter = 0.1;  // sd 10% of the backward end: 1 s at 10 s
  const StepPrediction s = replay_step(two_layer(), {rank_of(p, 4), rank_of(p, 4)}, comm(1, 0.001), 144);
  EXPECT_NEAR(s.jitter_seconds, std::sqrt(2.0) / std::sqrt(2 * M_PI), 1e-12);  // theta * pdf(0), theta = sqrt 2
  EXPECT_NEAR(s.step_seconds, 13.076 + s.jitter_seconds, 1e-12);
  EXPECT_NEAR(s.ranks[0].wait_seconds, 1.544 + s.jitter_seconds, 1e-12);
  // A rank 10 s behind the other (sd 1 s and 2 s): the spread hardly matters.
  const DeviceProfile slow = [&] {
    DeviceProfile q = two_layer_profile(2);
    q.step_jitter = 0.1;
    return q;
  }();
  EXPECT_LT(replay_step(two_layer(), {rank_of(p, 4), rank_of(slow, 4)}, comm(1, 0.001), 144).jitter_seconds, 1e-5);  // 1.8e-6 s
  // One rank waits for nobody.
  EXPECT_EQ(replay_step(two_layer(), {rank_of(p, 4)}, comm(1, 0.001), 144).jitter_seconds, 0);
}

TEST(Replayer, TheStepResidualComesBeforeTheFirstLayerAndScalesWithTheBatch) {
  DeviceProfile p = two_layer_profile(1, 4);
  p.step_overhead_seconds = 1.5;
  p.step_overhead_bytes = 600;
  const StepPrediction s = replay_step(two_layer(), {rank_of(p, 4)}, comm(1, 0.001), 144);
  EXPECT_DOUBLE_EQ(s.ranks[0].compute_seconds, 10.5 + 1.5);
  EXPECT_EQ(s.ranks[0].peak_memory_bytes, 11400 + 600);
  // Two ranks: the residual delays every gradient, so the slow rank's buckets come 1.5 later
  // for both (the fast rank, without residual, waits that much longer at the first bucket).
  const DeviceProfile fast = two_layer_profile(1, 4);
  const StepPrediction two = replay_step(two_layer(), {rank_of(fast, 4), rank_of(p, 4)}, comm(0, 0), 144);
  EXPECT_DOUBLE_EQ(two.ranks[1].backward_end_seconds - two.ranks[0].backward_end_seconds, 1.5);
  // At batch 8 the residual doubles with the rest.
  EXPECT_DOUBLE_EQ(replay_step(two_layer(), {rank_of(p, 8)}, comm(0, 0), 144).ranks[0].compute_seconds,
                   2 * 10 + 0.5 + 3.0);
}

// The profiler's residual is the measured FP32 step less this replay of it in the world it was
// measured in: with the gradient copies into the buckets of a world of two (charged by the replay
// on its own), so a world's FP32 prediction gives back the step it was fitted to, not that step
// plus the copies once more.
TEST(Replayer, TheProfilesFp32StepIsReplayedInItsWorldWithTheBucketCopies) {
  DeviceProfile p = two_layer_profile(1, 4);
  p.casts[{Precision::FP32, Precision::FP32}] = LinearCost{0.01, 0};  // 172 gradients: 1.72 s
  p.step_overhead_seconds = 7;  // left out of the replay
  const RankPrediction alone = replay_profile_fp32_step(two_layer(), p, 1, 25ll << 20);
  EXPECT_DOUBLE_EQ(alone.compute_seconds, 10.5);
  const RankPrediction pair = replay_profile_fp32_step(two_layer(), p, 2, 25ll << 20);
  EXPECT_DOUBLE_EQ(pair.compute_seconds, 10.5 + 1.72);
  const double measured = 13.0;  // a world-of-two FP32 step (compute and optimizer)
  p.step_overhead_seconds = measured - pair.compute_seconds;
  const StepPrediction s = replay_step(two_layer(), {rank_of(p, 4), rank_of(p, 4)}, comm(0, 0), 25ll << 20);
  EXPECT_DOUBLE_EQ(s.ranks[0].compute_seconds, measured);
  expect_error<std::invalid_argument>([&] { replay_profile_fp32_step(two_layer(), p, 0, 25ll << 20); }, {"one rank"});
}

TEST(Replayer, MemoryIsStaticPlusSavedAtTheLocalBatchPlusWeightCopies) {
  const DeviceProfile p = two_layer_profile(1, 4);
  // At the profile batch: 10000 + 1000 + 400.
  EXPECT_EQ(replay_step(two_layer(), {rank_of(p, 4)}, comm(0, 0), 144).ranks[0].peak_memory_bytes, 11400);
  // At batch 8 (profile measured at 4): saved bytes and times double, static does not.
  const StepPrediction s8 = replay_step(two_layer(), {rank_of(p, 8)}, comm(0, 0), 144);
  EXPECT_EQ(s8.ranks[0].peak_memory_bytes, 10000 + 2000 + 800);
  EXPECT_DOUBLE_EQ(s8.ranks[0].compute_seconds, 2 * 10 + 0.5);
  // fc0 at int8: its int8 costs (casts included) and its int8 weight copy.
  const StepPrediction q = replay_step(two_layer(), {rank_of(p, 4, LayerPrecision::INT8)}, comm(0, 0), 144);
  EXPECT_EQ(q.ranks[0].peak_memory_bytes, 10000 + 250 + 136 + 400);
  EXPECT_DOUBLE_EQ(q.ranks[0].compute_seconds, 0.5 + 2 + 2 + 3 + 0.5);
}

TEST(Replayer, ErrorsNameTheLayerThePrecisionAndTheFix) {
  const DeviceProfile p = two_layer_profile(1);
  expect_error<std::invalid_argument>(
      [&] { replay_step(two_layer(), {rank_of(p, 4, LayerPrecision::FP16)}, comm(0, 0), 144); },
      {"rank 0", "fast", "fc0", "fp16", "fp32, int8", "plan one of those"});
  DeviceProfile missing = p;
  missing.gemm_layers.erase("fc1");
  expect_error<std::invalid_argument>([&] { replay_step(two_layer(), {rank_of(missing, 4)}, comm(0, 0), 144); },
                                      {"fc1", "qsync-worker profile"});
  expect_error<std::invalid_argument>([&] { replay_step(two_layer(), {rank_of(p, 0)}, comm(0, 0), 144); },
                                      {"local batch"});
}

}  // namespace
}  // namespace qsync
