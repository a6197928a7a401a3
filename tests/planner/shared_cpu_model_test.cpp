// File: tests/planner/shared_cpu_model_test.cpp
// Tests of planner/shared_cpu_model.h: the compute span (the ranks' total CPU work over the CPUs,
// or the slowest rank's own), the step and waits it moves, the fit that reproduces the profiling
// world's measured uniform FP32 step, a lighter weak rank freeing CPU time for the others, and
// the worlds and inputs it refuses.
#include "planner/shared_cpu_model.h"

#include <gtest/gtest.h>

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/planner/synthetic_job.h"

namespace qsync {
namespace {

using qsync::testing::blank_profile;
using qsync::testing::chain_model;
using qsync::testing::cost;

StepPrediction replayed(const std::vector<double>& compute, double step) {
  StepPrediction p;
  p.step_seconds = step;
  for (double c : compute) {
    RankPrediction r;
    r.compute_seconds = c;
    r.step_seconds = step;
    r.wait_seconds = step - c;
    p.ranks.push_back(r);
  }
  return p;
}

TEST(SharedCpuModel, SpanIsTheTotalWorkOverTheCpusOrTheSlowestRank) {
  const StepPrediction p = replayed({4, 10, 8}, 12);  // a tail of 2 after the slowest compute
  SharedCpus s{2, {1, 1, 1}, 0.5, 1.0};
  EXPECT_DOUBLE_EQ(shared_compute_span(p, s), 0.5 * 22 / 2);  // work-bound: 22 s of CPU on 2 CPUs
  s.threads = {1, 1, 2};
  EXPECT_DOUBLE_EQ(shared_compute_span(p, s), 0.5 * 30 / 2);  // a rank of 2 threads takes twice the CPU
  s.cpus = 8;
  EXPECT_DOUBLE_EQ(shared_compute_span(p, s), 0.5 * 10);  // CPUs to spare: the slowest rank's own

  StepPrediction q = p;
  q.jitter_seconds = 0.5;  // of the 2 s after the slowest compute: the ranks' spread, inside the span
  s = {2, {1, 1, 1}, 0.5, 1.0};
  share_cpus(q, s);
  EXPECT_DOUBLE_EQ(q.step_seconds, 5.5 + 1.5);  // the span, then the replay's tail without the spread
  EXPECT_DOUBLE_EQ(q.jitter_seconds, 0);
  for (size_t r = 0; r < 3; ++r) {
    EXPECT_DOUBLE_EQ(q.ranks[r].step_seconds, 7);
    EXPECT_DOUBLE_EQ(q.ranks[r].compute_seconds, p.ranks[r].compute_seconds);  // as replayed
  }
  EXPECT_DOUBLE_EQ(q.ranks[0].wait_seconds, 8 - 5);
  EXPECT_DOUBLE_EQ(q.ranks[1].wait_seconds, 0);  // 2 - 5: never below 0
  s.work_scale = 2;  // a longer span: the difference is waiting
  StepPrediction longer = p;
  share_cpus(longer, s);
  EXPECT_DOUBLE_EQ(longer.step_seconds, 22 + 2);
  EXPECT_DOUBLE_EQ(longer.ranks[1].wait_seconds, 2 + 12);
}

// flatten -> fc0 (16 -> 4); the weak class computes at 3x the fast one's time, 1.5x in INT8.
struct SharedPool {
  ModelDesc model = chain_model({4}, "one-layer");
  DeviceProfile fast = blank_profile(model, "fast", 4), weak = blank_profile(model, "weak", 4);
  std::string world = "fast@4x1,weak@4x1,weak@4x1 unpinned";
  CommProfile comm;
  SharedPool() {
    fast.gemm_layers["fc0"][LayerPrecision::FP32] = cost(1, 2);
    weak.gemm_layers["fc0"][LayerPrecision::FP32] = cost(3, 6);
    weak.gemm_layers["fc0"][LayerPrecision::INT8] = cost(1.5, 3);
    comm.world_size = 3;
    comm.alpha = 0.25;
    comm.beta = 0;
    for (DeviceProfile* p : {&fast, &weak}) {
      p->world_size = 3;
      p->world_signature = world;
      p->world_step_seconds = 20;
      p->step_jitter = 0.1;  // a spread the replay adds to the step, which the span replaces
    }
  }
  std::vector<const DeviceProfile*> pool() const { return {&fast, &weak, &weak}; }
  StepPrediction replay(LayerPrecision weak_precision) const {
    std::vector<ReplayRank> ranks;
    for (const DeviceProfile* p : pool()) {
      ReplayRank r{p, plan_uniform(model, LayerPrecision::FP32)};
      if (p == &weak) r.plan.layers["fc0"] = weak_precision;
      r.plan.local_batch = 4;
      ranks.push_back(r);
    }
    return replay_step(model, ranks, comm, 25ll << 20);
  }
};

TEST(SharedCpuModel, FitReproducesTheWorldsUniformStepAndALighterRankFreesCpuTime) {
  const SharedPool pool;
  const std::optional<SharedCpus> s =
      shared_cpus_fit(pool.model, pool.pool(), {1, 1, 1}, 2, pool.comm, 25ll << 20, pool.world);
  ASSERT_TRUE(s.has_value());
  StepPrediction uniform = pool.replay(LayerPrecision::FP32);
  const double replayed_step = uniform.step_seconds, jitter = uniform.jitter_seconds;
  EXPECT_GT(jitter, 0);
  EXPECT_NEAR(s->uniform_ratio, 20 / replayed_step, 1e-12);
  share_cpus(uniform, *s);
  EXPECT_NEAR(uniform.step_seconds, 20, 1e-12);  // the world's measured step, by construction
  // compute 3 / 9 / 9 s: 21 s of CPU over 2 CPUs is the span (10.5 > 9), scaled to what was measured.
  const double tail = replayed_step - jitter - 9;
  EXPECT_NEAR(s->work_scale, (20 - tail) / 10.5, 1e-12);
  // The weak ranks in INT8 (4.5 s each): the span is the work, 12 s over 2 CPUs, not the slowest
  // rank's 4.5 s: scaling the replayed step by the uniform ratio would predict far less.
  StepPrediction int8 = pool.replay(LayerPrecision::INT8);
  const double int8_replayed = int8.step_seconds, int8_jitter = int8.jitter_seconds;
  share_cpus(int8, *s);
  EXPECT_NEAR(int8.step_seconds, s->work_scale * 6 + (int8_replayed - int8_jitter - 4.5), 1e-12);
  EXPECT_GT(int8.step_seconds, int8_replayed * s->uniform_ratio);
  EXPECT_LT(int8.step_seconds, 20);
}

TEST(SharedCpuModel, FitNeedsTheMeasurementOfThisVeryWorld) {
  SharedPool pool;
  auto fit = [&](const std::string& world, int cpus = 2) {
    return shared_cpus_fit(pool.model, pool.pool(), {1, 1, 1}, cpus, pool.comm, 25ll << 20, world);
  };
  ASSERT_TRUE(fit(pool.world).has_value());
  EXPECT_FALSE(fit("fast@4x1,weak@4x1,weak@4x1 pinned").has_value());  // another world of that size
  for (DeviceProfile* p : {&pool.fast, &pool.weak}) p->world_size = 2;
  EXPECT_FALSE(fit(pool.world).has_value());  // a world of another size
  for (DeviceProfile* p : {&pool.fast, &pool.weak}) p->world_size = 3, p->world_step_seconds = 0.1;
  EXPECT_FALSE(fit(pool.world).has_value());  // shorter than the replay's tail alone: not this model's
  for (DeviceProfile* p : {&pool.fast, &pool.weak}) p->world_size = 0, p->world_step_seconds = 0;
  EXPECT_FALSE(fit(pool.world).has_value());  // measured alone
  EXPECT_THROW(fit(pool.world, 0), std::invalid_argument);
  EXPECT_THROW(shared_cpus_fit(pool.model, pool.pool(), {1, 1}, 2, pool.comm, 25ll << 20, pool.world),
               std::invalid_argument);  // a thread count short
  EXPECT_THROW(shared_cpus_fit(pool.model, {&pool.fast, nullptr}, {1, 1}, 2, pool.comm, 25ll << 20, pool.world),
               std::invalid_argument);
  // A profile scaled to another batch no longer carries its world's step (measured at its batch).
  const DeviceProfile moved = device_profile_scaled(pool.fast, 8);
  EXPECT_EQ(moved.world_size, 0);
  EXPECT_DOUBLE_EQ(moved.world_step_seconds, 0);
  EXPECT_TRUE(moved.world_signature.empty());
}

}  // namespace
}  // namespace qsync
