// Unit tests for worker/loss: softmax cross-entropy values, gradient, divisor convention, errors.
#include <gtest/gtest.h>

#include <cmath>

#include "tests/worker/layers/layer_test_support.h"
#include "worker/loss.h"

namespace qsync::testing {
namespace {

TEST(SoftmaxCrossEntropy, HandComputedTwoClasses) {
  // Row 0: logits (2, 0), target 0. p0 = e^2 / (e^2 + 1) = 0.8807970779778824,
  //   loss -log p0 = 0.12692801104297252.  Row 1: same logits, target 1: loss -log(1 - p0) =
  //   2.1269280110429722. Mean over 2 positions = 1.1269280110429723; one argmax is right.
  Tensor logits = tensor_from({2, 2}, {2, 0, 2, 0});
  MemoryAccount account;
  SoftmaxXentResult r = softmax_cross_entropy(logits, {0, 1}, 2.0f, &account);
  EXPECT_NEAR(r.loss, 1.1269280110429723, 1e-6);
  EXPECT_NEAR(r.loss_sum, 2.2538560220859447, 1e-6);
  EXPECT_EQ(r.correct, 1);
  EXPECT_EQ(r.positions, 2);
  // dlogits = (p - onehot) / 2.
  const double p0 = 0.8807970779778824;
  const double want[] = {(p0 - 1) / 2, (1 - p0) / 2, p0 / 2, (1 - p0 - 1) / 2};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(r.dlogits.f32()[i], want[i], 1e-7) << i;
  EXPECT_EQ(account.current_bytes(), r.dlogits.bytes());
}

TEST(SoftmaxCrossEntropy, GradientMatchesFiniteDifferences) {
  std::mt19937_64 rng(27);
  Tensor logits = random_tensor({3, 5}, rng, -3.0f, 3.0f);
  const std::vector<int32_t> targets{4, 0, 2};
  const float divisor = 3.0f;
  SoftmaxXentResult r = softmax_cross_entropy(logits, targets, divisor, nullptr);
  // Central differences of the loss (h = 1e-3; the loss is O(1) and accumulated in double, the
  // per-row exp is FP32, so the numeric derivative carries ~1e-4 absolute noise).
  const double h = 1e-3;
  for (int64_t i = 0; i < logits.numel(); ++i) {
    const float v = logits.f32()[i];
    logits.f32()[i] = float(v + h);
    const double lp = softmax_cross_entropy(logits, targets, divisor, nullptr).loss_sum / divisor;
    logits.f32()[i] = float(v - h);
    const double lm = softmax_cross_entropy(logits, targets, divisor, nullptr).loss_sum / divisor;
    logits.f32()[i] = v;
    const double numeric = (lp - lm) / (double(float(v + h)) - double(float(v - h)));
    EXPECT_NEAR(r.dlogits.f32()[i], numeric, 5e-4) << i;
  }
}

TEST(SoftmaxCrossEntropy, LanguageModelShapeAndDivisor) {
  std::mt19937_64 rng(28);
  Tensor logits = random_tensor({2, 3, 7}, rng, -2.0f, 2.0f);  // (B, T, V)
  const std::vector<int32_t> targets{0, 6, 3, 3, 1, 5};         // b * T + t
  SoftmaxXentResult mean = softmax_cross_entropy(logits, targets, 6.0f, nullptr);
  EXPECT_EQ(mean.positions, 6);
  EXPECT_EQ(mean.dlogits.shape(), (Shape{2, 3, 7}));
  // Same as the (B * T, V) classification of the same rows.
  SoftmaxXentResult flat = softmax_cross_entropy(logits.reshape({6, 7}), targets, 6.0f, nullptr);
  EXPECT_EQ(mean.loss, flat.loss);
  EXPECT_EQ(values_of(mean.dlogits), values_of(flat.dlogits));
  // A global divisor (e.g. 4 ranks' positions) scales loss and gradient by 1/4 of the mean's.
  SoftmaxXentResult global = softmax_cross_entropy(logits, targets, 24.0f, nullptr);
  EXPECT_NEAR(global.loss, mean.loss / 4, 1e-7);
  EXPECT_EQ(global.loss_sum, mean.loss_sum);
  for (int64_t i = 0; i < logits.numel(); ++i) EXPECT_NEAR(global.dlogits.f32()[i], mean.dlogits.f32()[i] / 4, 1e-8);
  // Every row of dlogits sums to 0 (softmax sums to 1, one-hot to 1).
  for (int64_t row = 0; row < 6; ++row) {
    double s = 0;
    for (int64_t v = 0; v < 7; ++v) s += mean.dlogits.f32()[row * 7 + v];
    EXPECT_NEAR(s, 0.0, 1e-7);
  }
}

TEST(SoftmaxCrossEntropy, StableForLargeLogits) {
  Tensor big = tensor_from({1, 2}, {1002, 1000});
  Tensor small = tensor_from({1, 2}, {2, 0});
  SoftmaxXentResult a = softmax_cross_entropy(big, {1}, 1.0f, nullptr);
  SoftmaxXentResult b = softmax_cross_entropy(small, {1}, 1.0f, nullptr);
  EXPECT_TRUE(std::isfinite(a.loss));
  EXPECT_NEAR(a.loss, b.loss, 1e-6);
  EXPECT_EQ(values_of(a.dlogits), values_of(b.dlogits));
  SoftmaxXentResult c = softmax_cross_entropy(tensor_from({1, 2}, {-1e30f, 0}), {1}, 1.0f, nullptr);
  EXPECT_EQ(c.loss, 0.0f);
}

TEST(SoftmaxCrossEntropy, ArgmaxTiesAndErrors) {
  // Ties: the first maximum is the prediction.
  SoftmaxXentResult t = softmax_cross_entropy(tensor_from({2, 3}, {1, 1, 0, 1, 1, 0}), {0, 1}, 2.0f, nullptr);
  EXPECT_EQ(t.correct, 1);
  Tensor logits = tensor_from({2, 3}, {0, 0, 0, 0, 0, 0});
  EXPECT_THROW(softmax_cross_entropy(logits, {0, 3}, 2.0f, nullptr), std::invalid_argument);
  EXPECT_THROW(softmax_cross_entropy(logits, {0, -1}, 2.0f, nullptr), std::invalid_argument);
  EXPECT_THROW(softmax_cross_entropy(logits, {0}, 2.0f, nullptr), std::invalid_argument);
  EXPECT_THROW(softmax_cross_entropy(logits, {0, 1}, 0.0f, nullptr), std::invalid_argument);
  EXPECT_THROW(softmax_cross_entropy(Tensor::zeros({6}, Precision::FP32, nullptr), {0}, 1.0f, nullptr),
               std::invalid_argument);
}

}  // namespace
}  // namespace qsync::testing
