// Unit tests for worker/layers/dropout and layer_seed.h: eval identity, inverted scaling, the
// counter-based mask's determinism, gradients and memory.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>

#include "tests/worker/gradient_check.h"
#include "tests/worker/layers/layer_test_support.h"
#include "worker/layers/dropout.h"
#include "worker/layers/layer_seed.h"

namespace qsync::testing {
namespace {

LayerDesc dropout_desc(const std::string& name, const Shape& in, double p) {
  LayerDesc d = make_desc(name, LayerKind::DROPOUT, in);
  d.p = p;
  return d;
}

Tensor ones(const Shape& shape) {
  Tensor t = Tensor::empty(shape, Precision::FP32, nullptr);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = 1.0f;
  return t;
}

TEST(LayerSeed, ExactDefinition) {
  EXPECT_EQ(splitmix64(0), 0xe220a8397b1dcdafULL);  // SplitMix64's first output from state 0
  EXPECT_EQ(fnv1a64(""), 0xcbf29ce484222325ULL);
  EXPECT_EQ(fnv1a64("a"), 0xaf63dc4c8601ec8cULL);
  // Pinned values (computed independently): masks and rounding of saved runs depend on them.
  EXPECT_EQ(layer_seed(0, 0, ""), 0x7dc2c42b173ebf65ULL);
  EXPECT_EQ(layer_seed(42, 7, "blocks.0.attn.qkv"), 0xe23fb795f1af2469ULL);
  EXPECT_EQ(layer_seed(1, -1, "drop"), 0x28f9f93e38cc3694ULL);
  EXPECT_NE(layer_seed(42, 7, "a"), layer_seed(42, 8, "a"));
  EXPECT_NE(layer_seed(42, 7, "a"), layer_seed(43, 7, "a"));
  EXPECT_NE(layer_seed(42, 7, "a"), layer_seed(42, 7, "b"));
}

TEST(DropoutLayer, EvalAndZeroPAreIdentity) {
  std::mt19937_64 rng(17);
  Tensor x = random_tensor({4, 10}, rng);
  StepContext ctx;
  ctx.training = false;
  DropoutLayer drop(dropout_desc("drop", {10}, 0.5), nullptr);
  Tensor y = drop.forward(x, ctx);
  EXPECT_EQ(y.data(), x.data());
  EXPECT_EQ(drop.saved_bytes(), 0);

  ctx.training = true;
  DropoutLayer none(dropout_desc("none", {10}, 0.0), nullptr);
  y = none.forward(x, ctx);
  EXPECT_EQ(y.data(), x.data());
  EXPECT_EQ(none.saved_bytes(), 0);
  Tensor dy = random_tensor({4, 10}, rng);
  EXPECT_EQ(none.backward(dy, ctx).data(), dy.data());
}

TEST(DropoutLayer, InvertedScalingPreservesTheMean) {
  // x = 1 everywhere, p = 0.3: y_i = keep_i / 0.7 with keep_i ~ Bernoulli(0.7) independent.
  // Over n = 100000 elements: E[mean y] = 1, sd(mean y) = sqrt(p / ((1 - p) n)) = 2.07e-3;
  // the kept fraction has sd sqrt(p (1 - p) / n) = 1.45e-3. Bounds: 5 sd (a fair hash fails
  // them with probability < 1e-6; the test is deterministic for its seed anyway).
  const int64_t n = 100000;
  const double p = 0.3;
  DropoutLayer drop(dropout_desc("drop", {n / 10}, p), nullptr);
  StepContext ctx;
  ctx.seed = 1234;
  ctx.step = 5;
  Tensor y = drop.forward(ones({10, n / 10}), ctx);
  double sum = 0;
  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float v = y.f32()[i];
    ASSERT_TRUE(v == 0.0f || v == float(1.0 / (1.0 - p))) << v;
    sum += v;
    kept += v != 0.0f;
  }
  EXPECT_NEAR(sum / double(n), 1.0, 5 * std::sqrt(p / ((1 - p) * double(n))));
  EXPECT_NEAR(double(kept) / double(n), 1 - p, 5 * std::sqrt(p * (1 - p) / double(n)));
  // Eval keeps the mean exactly.
  ctx.training = false;
  Tensor e = drop.forward(ones({10, n / 10}), ctx);
  EXPECT_EQ(e.f32()[123], 1.0f);
}

TEST(DropoutLayer, MaskIsDeterministicBySeedStepAndName) {
  const Shape shape{8, 4096};  // above the parallel threshold
  Tensor x = ones(shape);
  auto mask_of = [&](const std::string& name, uint64_t seed, int64_t step, int threads) {
    DropoutLayer drop(dropout_desc(name, {4096}, 0.25), nullptr);
    StepContext ctx;
    ctx.seed = seed;
    ctx.step = step;
    const int before = omp_get_max_threads();
    omp_set_num_threads(threads);
    std::vector<float> v = values_of(drop.forward(x, ctx));
    omp_set_num_threads(before);
    return v;
  };
  const std::vector<float> base = mask_of("blocks.0.drop", 7, 3, 1);
  EXPECT_EQ(mask_of("blocks.0.drop", 7, 3, 1), base);
  EXPECT_EQ(mask_of("blocks.0.drop", 7, 3, 2), base);  // thread count does not matter
  EXPECT_EQ(mask_of("blocks.0.drop", 7, 3, 4), base);
  EXPECT_NE(mask_of("blocks.0.drop", 7, 4, 1), base);  // next step
  EXPECT_NE(mask_of("blocks.0.drop", 8, 3, 1), base);  // other run seed
  EXPECT_NE(mask_of("blocks.1.drop", 7, 3, 1), base);  // other layer
  // Element i's fate is the documented hash.
  const uint64_t key = layer_seed(7, 3, "blocks.0.drop");
  for (int64_t i : {0, 1, 4095, 4096, 8 * 4096 - 1})
    EXPECT_EQ(base[size_t(i)] != 0.0f, hash_to_unit(counter_hash(key, uint64_t(i))) >= 0.25) << i;
}

TEST(DropoutLayer, BackwardUsesTheForwardMask) {
  std::mt19937_64 rng(18);
  DropoutLayer drop(dropout_desc("drop", {50}, 0.4), nullptr);
  StepContext ctx;
  ctx.seed = 99;
  Tensor x = random_tensor({3, 50}, rng);
  Tensor y = drop.forward(x, ctx);
  Tensor dy = random_tensor({3, 50}, rng);
  Tensor dx = drop.backward(dy, ctx);
  const float scale = float(1.0 / 0.6);
  for (int64_t i = 0; i < 150; ++i) {
    const bool kept = y.f32()[i] != 0.0f;
    EXPECT_EQ(dx.f32()[i], kept ? dy.f32()[i] * scale : 0.0f) << i;
    if (kept) {
      EXPECT_EQ(y.f32()[i], x.f32()[i] * scale) << i;
    }
  }
}

TEST(DropoutLayer, GradientCheck) {
  std::mt19937_64 rng(19);
  DropoutLayer drop(dropout_desc("drop", {4, 6}, 0.5), nullptr);
  GradientCheckOptions opt;
  opt.probe_in_training = true;  // the same (seed, step, name) mask on every probe
  opt.ctx.seed = 5;
  opt.ctx.step = 2;
  GradientCheckResult r = gradient_check(drop, random_tensor({2, 4, 6}, rng), opt);
  EXPECT_TRUE(r.ok) << r.report();
}

TEST(DropoutLayer, AllDroppedAndInvalidP) {
  DropoutLayer all(dropout_desc("drop", {5}, 1.0), nullptr);
  StepContext ctx;
  Tensor y = all.forward(ones({2, 5}), ctx);
  for (int64_t i = 0; i < 10; ++i) EXPECT_EQ(y.f32()[i], 0.0f);
  Tensor dx = all.backward(ones({2, 5}), ctx);
  for (int64_t i = 0; i < 10; ++i) EXPECT_EQ(dx.f32()[i], 0.0f);
  EXPECT_THROW(DropoutLayer(dropout_desc("drop", {5}, -0.1), nullptr), std::invalid_argument);
  EXPECT_THROW(DropoutLayer(dropout_desc("drop", {5}, 1.5), nullptr), std::invalid_argument);
}

TEST(DropoutLayer, SavedBytesChargedAndReleased) {
  std::mt19937_64 rng(20);
  DropoutLayer drop(dropout_desc("drop", {3, 7}, 0.2), nullptr);
  Tensor x = random_tensor({2, 3, 7}, rng);
  EXPECT_EQ(check_step_memory(drop, x), x.numel());  // a 1-byte mask
}

}  // namespace
}  // namespace qsync::testing
