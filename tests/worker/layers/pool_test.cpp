// Unit tests for worker/layers/pool: max pooling and global average pooling.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "tests/worker/gradient_check.h"
#include "tests/worker/layers/layer_test_support.h"
#include "worker/layers/pool.h"

namespace qsync::testing {
namespace {

LayerDesc pool_desc(const Shape& in, int64_t kernel, int64_t stride, int64_t padding = 0) {
  LayerDesc d = make_desc("pool", LayerKind::MAXPOOL2D, in);
  d.kernel = kernel;
  d.stride = stride;
  d.padding = padding;
  return d;
}

// Distinct values spaced 0.01 apart in a shuffled order: no ties within 2h of the probe step.
Tensor distinct_values(const Shape& shape, std::mt19937_64& rng) {
  Tensor t = Tensor::empty(shape, Precision::FP32, nullptr);
  std::vector<int> order(size_t(t.numel()));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = 0.01f * float(order[size_t(i)]) - 1.0f;
  return t;
}

TEST(MaxPool2dLayer, HandExample) {
  MaxPool2dLayer pool(pool_desc({1, 4, 4}, 2, 2), nullptr);
  EXPECT_EQ(pool.desc().out_shape, (Shape{1, 2, 2}));
  StepContext ctx;
  Tensor x = tensor_from({1, 1, 4, 4}, {1, 2, 5, 6,  //
                                        3, 4, 8, 7,  //
                                        -1, -2, 0, 0,  //
                                        -3, -4, 0, 9});
  Tensor y = pool.forward(x, ctx);
  EXPECT_EQ(y.shape(), (Shape{1, 1, 2, 2}));
  EXPECT_EQ(values_of(y), (std::vector<float>{4, 8, -1, 9}));
  Tensor dx = pool.backward(tensor_from({1, 1, 2, 2}, {10, 20, 30, 40}), ctx);
  EXPECT_EQ(values_of(dx), (std::vector<float>{0, 0, 0, 0,  //
                                               0, 10, 20, 0,  //
                                               30, 0, 0, 0,  //
                                               0, 0, 0, 40}));
}

TEST(MaxPool2dLayer, TiesGoToTheFirstCell) {
  MaxPool2dLayer pool(pool_desc({1, 2, 2}, 2, 2), nullptr);
  StepContext ctx;
  pool.forward(tensor_from({1, 1, 2, 2}, {5, 5, 5, 5}), ctx);
  Tensor dx = pool.backward(tensor_from({1, 1, 1, 1}, {1}), ctx);
  EXPECT_EQ(values_of(dx), (std::vector<float>{1, 0, 0, 0}));
}

// NaN propagates (as in PyTorch): the first NaN of a window wins over every number after it.
TEST(MaxPool2dLayer, NanWinsTheWindow) {
  MaxPool2dLayer pool(pool_desc({1, 2, 4}, 2, 2), nullptr);
  StepContext ctx;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor y = pool.forward(tensor_from({1, 1, 2, 4}, {1, nan, 7, 2,  //
                                                     9, nan, 3, nan}), ctx);
  EXPECT_TRUE(std::isnan(y.f32()[0]));
  EXPECT_TRUE(std::isnan(y.f32()[1]));
  Tensor dx = pool.backward(tensor_from({1, 1, 1, 2}, {10, 20}), ctx);
  EXPECT_EQ(values_of(dx), (std::vector<float>{0, 10, 0, 0,  //
                                               0, 0, 0, 20}));
}

TEST(MaxPool2dLayer, OverlappingWindowsWithPadding) {
  // kernel 3, stride 1, padding 1 on 3x3: every output sees its 3x3 neighbourhood.
  MaxPool2dLayer pool(pool_desc({1, 3, 3}, 3, 1, 1), nullptr);
  EXPECT_EQ(pool.desc().out_shape, (Shape{1, 3, 3}));
  StepContext ctx;
  Tensor y = pool.forward(tensor_from({1, 1, 3, 3}, {-1, -2, -3, -4, -5, -6, -7, -8, -9}), ctx);
  EXPECT_EQ(values_of(y), (std::vector<float>{-1, -1, -2, -1, -1, -2, -4, -4, -5}));
  Tensor dx = pool.backward(tensor_from({1, 1, 3, 3}, {1, 1, 1, 1, 1, 1, 1, 1, 1}), ctx);
  // Gradients of overlapping windows add up at the winners.
  EXPECT_EQ(values_of(dx), (std::vector<float>{4, 2, 0, 2, 1, 0, 0, 0, 0}));
}

TEST(MaxPool2dLayer, GradientCheck) {
  std::mt19937_64 rng(4);
  MaxPool2dLayer pool(pool_desc({3, 6, 5}, 2, 2), nullptr);
  EXPECT_EQ(pool.desc().out_shape, (Shape{3, 3, 2}));
  GradientCheckResult r = gradient_check(pool, distinct_values({2, 3, 6, 5}, rng));
  EXPECT_TRUE(r.ok) << r.report();
  MaxPool2dLayer overlapping(pool_desc({2, 5, 5}, 3, 2, 1), nullptr);
  r = gradient_check(overlapping, distinct_values({2, 2, 5, 5}, rng));
  EXPECT_TRUE(r.ok) << r.report();
}

TEST(MaxPool2dLayer, SavedBytesAndErrors) {
  std::mt19937_64 rng(5);
  MaxPool2dLayer pool(pool_desc({3, 4, 4}, 2, 2), nullptr);
  EXPECT_EQ(check_step_memory(pool, random_tensor({2, 3, 4, 4}, rng)), 2 * 3 * 2 * 2 * 4);  // int32 argmax
  EXPECT_THROW(MaxPool2dLayer(pool_desc({4, 4}, 2, 2), nullptr), std::invalid_argument);
  EXPECT_THROW(MaxPool2dLayer(pool_desc({1, 4, 4}, 0, 2), nullptr), std::invalid_argument);
  EXPECT_THROW(MaxPool2dLayer(pool_desc({1, 2, 2}, 3, 1), nullptr), std::invalid_argument);
}

TEST(GlobalAvgPoolLayer, ImagesAndTokens) {
  StepContext ctx;
  GlobalAvgPoolLayer image(make_desc("gap", LayerKind::GLOBAL_AVG_POOL, {2, 2, 2}), nullptr);
  EXPECT_EQ(image.desc().out_shape, (Shape{2}));
  Tensor y = image.forward(tensor_from({1, 2, 2, 2}, {1, 2, 3, 4, 10, 20, 30, 40}), ctx);
  EXPECT_EQ(values_of(y), (std::vector<float>{2.5f, 25.0f}));
  Tensor dx = image.backward(tensor_from({1, 2}, {4, 8}), ctx);
  EXPECT_EQ(values_of(dx), (std::vector<float>{1, 1, 1, 1, 2, 2, 2, 2}));

  GlobalAvgPoolLayer tokens(make_desc("gap", LayerKind::GLOBAL_AVG_POOL, {2, 3}), nullptr);  // (T, C)
  EXPECT_EQ(tokens.desc().out_shape, (Shape{3}));
  y = tokens.forward(tensor_from({1, 2, 3}, {1, 2, 3, 3, 4, 5}), ctx);
  EXPECT_EQ(values_of(y), (std::vector<float>{2, 3, 4}));
  dx = tokens.backward(tensor_from({1, 3}, {2, 4, 6}), ctx);
  EXPECT_EQ(values_of(dx), (std::vector<float>{1, 2, 3, 1, 2, 3}));
  EXPECT_THROW(GlobalAvgPoolLayer(make_desc("gap", LayerKind::GLOBAL_AVG_POOL, {8}), nullptr),
               std::invalid_argument);
}

TEST(GlobalAvgPoolLayer, GradientCheckAndMemory) {
  std::mt19937_64 rng(6);
  GlobalAvgPoolLayer image(make_desc("gap", LayerKind::GLOBAL_AVG_POOL, {3, 4, 5}), nullptr);
  GradientCheckResult r = gradient_check(image, random_tensor({2, 3, 4, 5}, rng));
  EXPECT_TRUE(r.ok) << r.report();
  GlobalAvgPoolLayer tokens(make_desc("gap", LayerKind::GLOBAL_AVG_POOL, {7, 4}), nullptr);
  r = gradient_check(tokens, random_tensor({3, 7, 4}, rng));
  EXPECT_TRUE(r.ok) << r.report();
  EXPECT_EQ(check_step_memory(image, random_tensor({2, 3, 4, 5}, rng)), 0);
}

}  // namespace
}  // namespace qsync::testing
