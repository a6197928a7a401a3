// Unit tests for worker/layers/layernorm: hand values, parameters, gradients, memory.
#include <gtest/gtest.h>

#include <cmath>

#include "tests/worker/gradient_check.h"
#include "tests/worker/layers/layer_test_support.h"
#include "worker/layers/layernorm.h"

namespace qsync::testing {
namespace {

TEST(LayerNormLayer, HandValues) {
  LayerNormLayer ln(make_desc("ln", LayerKind::LAYERNORM, {4}), nullptr);
  StepContext ctx;
  // mean 2.5, biased var 1.25, rstd = 1 / sqrt(1.25 + 1e-5)
  Tensor y = ln.forward(tensor_from({1, 4}, {1, 2, 3, 4}), ctx);
  const double want[] = {-1.3416354199689269, -0.447211806656309, 0.447211806656309, 1.3416354199689269};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(y.f32()[i], want[i], 1e-6) << i;

  // weight and bias apply per channel.
  std::vector<Parameter*> params;
  ln.collect_parameters(params);
  params[0]->value.f32()[1] = 2.0f;
  params[1]->value.f32()[3] = 0.5f;
  ln.backward(Tensor::zeros({1, 4}, Precision::FP32, nullptr), ctx);
  y = ln.forward(tensor_from({1, 4}, {1, 2, 3, 4}), ctx);
  EXPECT_NEAR(y.f32()[1], 2.0 * want[1], 1e-6);
  EXPECT_NEAR(y.f32()[3], want[3] + 0.5, 1e-6);
  // A constant row normalizes to zero (var 0: rstd = 1 / sqrt(eps), no division by zero).
  y = ln.forward(tensor_from({1, 4}, {3, 3, 3, 3}), ctx);
  EXPECT_EQ(y.f32()[0], 0.0f);
}

TEST(LayerNormLayer, Parameters) {
  MemoryAccount account;
  LayerNormLayer ln(make_desc("blocks.0.ln1", LayerKind::LAYERNORM, {5, 8}), &account);
  EXPECT_EQ(ln.desc().out_shape, (Shape{5, 8}));
  std::vector<Parameter*> params;
  ln.collect_parameters(params);
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0]->name, "blocks.0.ln1.weight");
  EXPECT_EQ(params[1]->name, "blocks.0.ln1.bias");
  for (Parameter* p : params) {
    EXPECT_FALSE(p->decay);
    EXPECT_EQ(p->value.shape(), (Shape{8}));
  }
  std::mt19937_64 rng(1);
  ln.init_parameters(rng);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(params[0]->value.f32()[i], 1.0f);
    EXPECT_EQ(params[1]->value.f32()[i], 0.0f);
  }
  EXPECT_EQ(account.current_bytes(), 4 * 8 * 4);  // weight, bias and their grads
}

TEST(LayerNormLayer, GradientCheck) {
  std::mt19937_64 rng(9);
  LayerNormLayer ln(make_desc("ln", LayerKind::LAYERNORM, {3, 6}), nullptr);
  // Non-trivial weight and bias so that every term of the backward matters.
  std::vector<Parameter*> params;
  ln.collect_parameters(params);
  for (Parameter* p : params)
    for (int64_t i = 0; i < p->value.numel(); ++i) p->value.f32()[i] = std::uniform_real_distribution<float>(0.5f, 1.5f)(rng);
  GradientCheckResult r = gradient_check(ln, random_tensor({2, 3, 6}, rng, -2.0f, 2.0f));
  EXPECT_TRUE(r.ok) << r.report();
}

TEST(LayerNormLayer, GradientsAccumulate) {
  std::mt19937_64 rng(10);
  LayerNormLayer ln(make_desc("ln", LayerKind::LAYERNORM, {6}), nullptr);
  StepContext ctx;
  Tensor x = random_tensor({4, 6}, rng);
  Tensor dy = random_tensor({4, 6}, rng);
  std::vector<Parameter*> params;
  ln.collect_parameters(params);
  ln.forward(x, ctx);
  ln.backward(dy, ctx);
  const std::vector<float> once = values_of(params[0]->grad);
  ln.forward(x, ctx);
  ln.backward(dy, ctx);
  for (int i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(params[0]->grad.f32()[i], 2.0f * once[size_t(i)]);
}

TEST(LayerNormLayer, SavedBytesChargedAndReleased) {
  std::mt19937_64 rng(11);
  LayerNormLayer ln(make_desc("ln", LayerKind::LAYERNORM, {5, 8}), nullptr);
  // xhat (B, 5, 8) and rstd (B * 5), FP32.
  EXPECT_EQ(check_step_memory(ln, random_tensor({3, 5, 8}, rng)), (3 * 5 * 8 + 3 * 5) * 4);
}

}  // namespace
}  // namespace qsync::testing
