// Unit tests for worker/layers/reshape: Flatten (a view) and ToTokens (a per-sample transpose).
#include <gtest/gtest.h>

#include "tests/worker/gradient_check.h"
#include "tests/worker/layers/layer_test_support.h"
#include "worker/layers/reshape.h"

namespace qsync::testing {
namespace {

TEST(FlattenLayer, ShapesAndView) {
  FlattenLayer flatten(make_desc("flatten", LayerKind::FLATTEN, {2, 3, 4}), nullptr);
  EXPECT_EQ(flatten.desc().out_shape, (Shape{24}));
  std::mt19937_64 rng(7);
  Tensor x = random_tensor({5, 2, 3, 4}, rng);
  StepContext ctx;
  Tensor y = flatten.forward(x, ctx);
  EXPECT_EQ(y.shape(), (Shape{5, 24}));
  EXPECT_EQ(y.data(), x.data());  // a view
  Tensor dx = flatten.backward(y, ctx);
  EXPECT_EQ(dx.shape(), (Shape{5, 2, 3, 4}));
  EXPECT_EQ(check_step_memory(flatten, x), 0);
  GradientCheckResult r = gradient_check(flatten, x);
  EXPECT_TRUE(r.ok) << r.report();
}

TEST(ToTokensLayer, TransposesChannelsToTokens) {
  ToTokensLayer tokens(make_desc("tokens", LayerKind::TO_TOKENS, {2, 2, 3}), nullptr);
  EXPECT_EQ(tokens.desc().out_shape, (Shape{6, 2}));
  StepContext ctx;
  // Channel 0 holds 0..5, channel 1 holds 10..15 over the (2, 3) positions.
  Tensor x = tensor_from({1, 2, 2, 3}, {0, 1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 15});
  Tensor y = tokens.forward(x, ctx);
  EXPECT_EQ(y.shape(), (Shape{1, 6, 2}));
  EXPECT_EQ(values_of(y), (std::vector<float>{0, 10, 1, 11, 2, 12, 3, 13, 4, 14, 5, 15}));
  Tensor dx = tokens.backward(y, ctx);
  EXPECT_EQ(values_of(dx), values_of(x));
}

TEST(ToTokensLayer, GradientCheckAndMemory) {
  std::mt19937_64 rng(8);
  ToTokensLayer tokens(make_desc("tokens", LayerKind::TO_TOKENS, {3, 4, 2}), nullptr);
  Tensor x = random_tensor({2, 3, 4, 2}, rng);
  GradientCheckResult r = gradient_check(tokens, x);
  EXPECT_TRUE(r.ok) << r.report();
  EXPECT_EQ(check_step_memory(tokens, x), 0);
  EXPECT_THROW(ToTokensLayer(make_desc("tokens", LayerKind::TO_TOKENS, {3, 4}), nullptr), std::invalid_argument);
}

}  // namespace
}  // namespace qsync::testing
