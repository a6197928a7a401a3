// Unit tests for worker/layers/activation: ReLU and exact GELU values, gradients, shapes, memory.
#include <gtest/gtest.h>

#include <cmath>

#include "tests/worker/gradient_check.h"
#include "tests/worker/layers/layer_test_support.h"
#include "worker/layers/activation.h"

namespace qsync::testing {
namespace {

// Random values pushed at least `gap` away from zero (ReLU's kink).
Tensor away_from_zero(const Shape& shape, std::mt19937_64& rng, float gap) {
  Tensor t = random_tensor(shape, rng, -2.0f, 2.0f);
  for (int64_t i = 0; i < t.numel(); ++i) {
    float& v = t.f32()[i];
    if (std::fabs(v) < gap) v = v < 0 ? -gap : gap;
  }
  return t;
}

TEST(ReluLayer, ForwardAndBackwardValues) {
  ReluLayer relu(make_desc("relu", LayerKind::RELU, {4}), nullptr);
  StepContext ctx;
  Tensor x = tensor_from({2, 4}, {-1.0f, 0.0f, 2.0f, -0.5f, 3.0f, -3.0f, 0.25f, 1e-8f});
  Tensor y = relu.forward(x, ctx);
  EXPECT_EQ(values_of(y), (std::vector<float>{0, 0, 2, 0, 3, 0, 0.25f, 1e-8f}));
  Tensor dy = tensor_from({2, 4}, {1, 2, 3, 4, 5, 6, 7, 8});
  Tensor dx = relu.backward(dy, ctx);
  EXPECT_EQ(values_of(dx), (std::vector<float>{0, 0, 3, 0, 5, 0, 7, 8}));
}

TEST(ReluLayer, GradientCheck) {
  std::mt19937_64 rng(1);
  ReluLayer relu(make_desc("relu", LayerKind::RELU, {3, 5}), nullptr);
  GradientCheckResult r = gradient_check(relu, away_from_zero({2, 3, 5}, rng, 0.05f));
  EXPECT_TRUE(r.ok) << r.report();
}

TEST(GeluLayer, MatchesExactErfGelu) {
  // 0.5 x (1 + erf(x / sqrt 2)), computed in double (PyTorch nn.GELU() default, approximate='none').
  GeluLayer gelu(make_desc("gelu", LayerKind::GELU, {6}), nullptr);
  StepContext ctx;
  ctx.training = false;
  Tensor y = gelu.forward(tensor_from({1, 6}, {1.0f, -1.0f, 0.5f, 2.0f, -3.0f, 0.1f}), ctx);
  const double want[] = {0.8413447460685429, -0.15865525393145707, 0.34573123063700656,
                         1.9544997361036416, -0.00404969409489031, 0.053982783727702904};
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(y.f32()[i], want[i], 2e-7 * (1 + std::fabs(want[i]))) << i;
}

TEST(GeluLayer, GradientCheck) {
  std::mt19937_64 rng(2);
  GeluLayer gelu(make_desc("gelu", LayerKind::GELU, {4, 6}), nullptr);
  GradientCheckResult r = gradient_check(gelu, random_tensor({3, 4, 6}, rng, -3.0f, 3.0f));
  EXPECT_TRUE(r.ok) << r.report();
}

TEST(Activation, SavedBytesChargedAndReleased) {
  std::mt19937_64 rng(3);
  Tensor x = random_tensor({2, 3, 7}, rng);
  ReluLayer relu(make_desc("relu", LayerKind::RELU, {3, 7}), nullptr);
  EXPECT_EQ(check_step_memory(relu, x), x.numel());  // a 1-byte mask
  // GELU saves its FP32 derivative (written beside y), not its input: it reports the derivative's
  // bytes as saved, and the account is charged for the output and the derivative.
  GeluLayer gelu(make_desc("gelu", LayerKind::GELU, {3, 7}), nullptr);
  MemoryAccount account;
  StepContext ctx;
  ctx.memory = &account;
  ctx.training = true;
  {
    Tensor y = gelu.forward(x, ctx);
    EXPECT_EQ(gelu.saved_bytes(), x.bytes());
    EXPECT_EQ(account.current_bytes(), 2 * y.bytes());
    Tensor dx = gelu.backward(Tensor::zeros(y.shape(), Precision::FP32, nullptr), ctx);
    EXPECT_EQ(gelu.saved_bytes(), 0);
    EXPECT_EQ(account.current_bytes(), y.bytes() + dx.bytes());  // the derivative is released
  }
  EXPECT_EQ(account.current_bytes(), 0);
}

TEST(Activation, ShapeChecks) {
  ReluLayer relu(make_desc("relu1", LayerKind::RELU, {3, 5}), nullptr);
  EXPECT_EQ(relu.desc().out_shape, (Shape{3, 5}));
  StepContext ctx;
  Tensor wrong = Tensor::zeros({8, 3, 4}, Precision::FP32, nullptr);
  try {
    relu.forward(wrong, ctx);
    FAIL() << "expected a shape error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("relu1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("(B, 3, 5)"), std::string::npos) << e.what();
  }
  // Backward needs a training forward.
  EXPECT_THROW(relu.backward(Tensor::zeros({2, 3, 5}, Precision::FP32, nullptr), ctx), std::logic_error);
  // A resolved out_shape that disagrees is an error.
  LayerDesc d = make_desc("gelu", LayerKind::GELU, {4});
  d.out_shape = {5};
  EXPECT_THROW(GeluLayer(d, nullptr), std::invalid_argument);
}

}  // namespace
}  // namespace qsync::testing
