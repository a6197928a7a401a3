// File: tests/worker/layers/graph_layers_test.cpp
// The ONNX graph's layers (worker/layers/graph*.h, batchnorm.h, elementwise.h): forwards against
// plain formulas written here (the _ref of each), backwards against central differences
// (tests/worker/gradient_check.h), multi-input layers inside a GraphLayer (which also checks the
// graph's summing of gradients of values read twice). Awkward shapes: odd sizes, broadcasts of
// a leading 1, a trained operand, pads that crop.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "tests/worker/gradient_check.h"
#include "tests/worker/layers/layer_test_support.h"
#include "worker/layers/batchnorm.h"
#include "worker/layers/graph.h"
#include "worker/layers/graph_ops.h"

namespace qsync {
namespace {

using testing::gradient_check;
using testing::GradientCheckOptions;

GraphTensor constant(const std::string& name, const Shape& dims, std::vector<float> v) {
  return GraphTensor{name, dims, std::make_shared<const std::vector<float>>(std::move(v))};
}

LayerDesc node(const std::string& name, LayerKind kind, const std::string& op, std::vector<int> inputs,
               std::vector<Shape> shapes, const Shape& out) {
  LayerDesc d;
  d.name = name;
  d.kind = kind;
  d.op = op;
  d.graph_inputs = std::move(inputs);
  d.input_shapes = std::move(shapes);
  d.in_shape = d.input_shapes.at(0);
  d.out_shape = out;
  return d;
}

LayerDesc graph(const Shape& in, std::vector<LayerDesc> children) {
  LayerDesc g;
  g.name = "";
  g.kind = LayerKind::GRAPH;
  g.in_shape = in;
  g.graph_inputs = {int(children.size()) - 1};
  g.children = std::move(children);
  return g;
}

Tensor forward_eval(Layer& l, const Tensor& x) {
  StepContext ctx;
  ctx.training = false;
  return l.forward(x, ctx);
}

TEST(BatchNormLayer, NormalizesByBatchStatisticsAndKeepsRunningOnes) {
  LayerDesc d = node("bn", LayerKind::BATCHNORM, "BatchNormalization", {-1}, {{3, 2, 2}}, {3, 2, 2});
  d.constants = {constant("mean", {3}, {0, 0, 0}), constant("var", {3}, {1, 1, 1})};
  BatchNormLayer bn(d, nullptr);
  std::mt19937_64 rng(1);
  const Tensor x = testing::random_tensor({4, 3, 2, 2}, rng, -2, 3);
  StepContext ctx;
  const Tensor y = bn.forward(x, ctx);
  for (int64_t c = 0; c < 3; ++c) {  // ref: per channel over (B, H, W), biased variance, eps 1e-5
    double s = 0, s2 = 0;
    for (int64_t b = 0; b < 4; ++b)
      for (int64_t k = 0; k < 4; ++k) s += x.f32()[(b * 3 + c) * 4 + k];
    const double mean = s / 16;
    for (int64_t b = 0; b < 4; ++b)
      for (int64_t k = 0; k < 4; ++k) s2 += std::pow(x.f32()[(b * 3 + c) * 4 + k] - mean, 2);
    const double var = s2 / 16;
    for (int64_t b = 0; b < 4; ++b)
      for (int64_t k = 0; k < 4; ++k) {
        const int64_t at = (b * 3 + c) * 4 + k;
        EXPECT_NEAR(y.f32()[at], (x.f32()[at] - mean) / std::sqrt(var + 1e-5), 1e-5);  // FP32 rounding of O(1) values
      }
    EXPECT_NEAR(bn.running_mean()[size_t(c)], 0.1 * mean, 1e-6);                  // 0.9 * 0 + 0.1 * mean
    EXPECT_NEAR(bn.running_var()[size_t(c)], 0.9 + 0.1 * s2 / 15, 1e-6);          // unbiased, as PyTorch
  }
  (void)bn.backward(y, ctx);
  GradientCheckOptions opt;
  opt.probe_in_training = true;  // the training forward (batch statistics) is the function checked
  const auto r = gradient_check(bn, x, opt);
  EXPECT_TRUE(r.ok) << r.report();
}

TEST(UnaryLayer, SigmoidTanhErfMatchTheirFormulasAndGradients) {
  std::mt19937_64 rng(2);
  const Tensor x = testing::random_tensor({3, 5}, rng, -2, 2);
  for (const char* op : {"Sigmoid", "Tanh", "Erf"}) {
    auto l = layer_create(node("u", LayerKind::UNARY, op, {-1}, {{5}}, {5}), nullptr);
    const Tensor y = forward_eval(*l, x);
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double v = x.f32()[i];
      const double want = std::string(op) == "Sigmoid" ? 1 / (1 + std::exp(-v)) : std::string(op) == "Tanh" ? std::tanh(v) : std::erf(v);
      EXPECT_NEAR(y.f32()[i], want, 1e-6) << op;  // libm in float vs double
    }
    const auto r = gradient_check(*l, x);
    EXPECT_TRUE(r.ok) << op << "\n" << r.report();
  }
}

// x (2, 3) -> t = tanh(x); m = t * x; q = m / c (c (3) broadcast); s = p - q (p (1, 2, 3) trained)
TEST(BinaryLayer, BroadcastsActivationsConstantsAndTrainedOperands) {
  std::vector<LayerDesc> n;
  n.push_back(node("t", LayerKind::UNARY, "Tanh", {-1}, {{2, 3}}, {2, 3}));
  LayerDesc mul = node("m", LayerKind::BINARY, "Mul", {0, -1}, {{2, 3}, {2, 3}}, {2, 3});
  mul.axes = {1, 1};
  n.push_back(mul);
  LayerDesc div = node("q", LayerKind::BINARY, "Div", {1}, {{2, 3}}, {2, 3});
  div.axes = {1, 0};
  div.constants = {constant("c", {3}, {2.0f, -1.5f, 0.75f})};
  n.push_back(div);
  LayerDesc sub = node("s", LayerKind::BINARY, "Sub", {2}, {{2, 3}}, {2, 3});
  sub.axes = {2, 1};
  sub.initial = {constant("p", {1, 2, 3}, {0.1f, -0.2f, 0.3f, 0.4f, -0.5f, 0.6f})};
  n.push_back(sub);
  auto g = layer_create(graph({2, 3}, n), nullptr);
  std::mt19937_64 rng(3);
  g->init_parameters(rng);
  const Tensor x = testing::random_tensor({4, 2, 3}, rng, -1.5, 1.5);
  const Tensor y = forward_eval(*g, x);
  const float c[3] = {2.0f, -1.5f, 0.75f}, p[6] = {0.1f, -0.2f, 0.3f, 0.4f, -0.5f, 0.6f};
  for (int64_t i = 0; i < x.numel(); ++i) {
    const float v = x.f32()[i];
    EXPECT_NEAR(y.f32()[i], p[i % 6] - std::tanh(v) * v / c[i % 3], 1e-6);
  }
  const auto r = gradient_check(*g, x);
  EXPECT_TRUE(r.ok) << r.report();
}

// x (2, 3, 3) -> where(causal, x, -5) -> softmax
TEST(WhereAndSoftmax, MaskAndNormalizeRows) {
  std::vector<LayerDesc> n;
  LayerDesc where = node("w", LayerKind::WHERE, "Where", {-1}, {{2, 3, 3}}, {2, 3, 3});
  where.axes = {1, 0};
  where.constants = {constant("causal", {3, 3}, {1, 0, 0, 1, 1, 0, 1, 1, 1}), constant("fill", {}, {-5.0f})};
  n.push_back(where);
  n.push_back(node("sm", LayerKind::SOFTMAX, "Softmax", {0}, {{2, 3, 3}}, {2, 3, 3}));
  auto g = layer_create(graph({2, 3, 3}, n), nullptr);
  std::mt19937_64 rng(4);
  const Tensor x = testing::random_tensor({2, 2, 3, 3}, rng);
  const Tensor y = forward_eval(*g, x);
  for (int64_t row = 0; row < x.numel() / 3; ++row) {
    const int64_t i = row % 3;  // query position
    double z[3], sum = 0;
    for (int64_t j = 0; j < 3; ++j) sum += z[j] = std::exp(j <= i ? x.f32()[row * 3 + j] : -5.0);
    for (int64_t j = 0; j < 3; ++j) EXPECT_NEAR(y.f32()[row * 3 + j], z[j] / sum, 1e-6);
  }
  const auto r = gradient_check(*g, x);
  EXPECT_TRUE(r.ok) << r.report();
}

// x (3, 4) -> xt = transpose(x) (4, 3) -> x @ xt (3, 3); and concat(x, x @ xt... ) along axis 1
TEST(TransposeMatMulConcat, GradientsOfValuesReadTwiceAreSummed) {
  std::vector<LayerDesc> n;
  LayerDesc t = node("t", LayerKind::TRANSPOSE, "Transpose", {-1}, {{3, 4}}, {4, 3});
  t.axes = {1, 0};
  n.push_back(t);
  n.push_back(node("mm", LayerKind::MATMUL, "MatMul", {-1, 0}, {{3, 4}, {4, 3}}, {3, 3}));
  LayerDesc cat = node("cat", LayerKind::CONCAT, "Concat", {-1, 1}, {{3, 4}, {3, 3}}, {3, 7});
  cat.axes = {1};
  n.push_back(cat);
  auto g = layer_create(graph({3, 4}, n), nullptr);
  std::mt19937_64 rng(5);
  const Tensor x = testing::random_tensor({2, 3, 4}, rng);
  const Tensor y = forward_eval(*g, x);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t i = 0; i < 3; ++i) {
      const float* xi = x.f32() + b * 12 + i * 4;
      for (int64_t j = 0; j < 4; ++j) EXPECT_EQ(y.f32()[b * 21 + i * 7 + j], xi[j]);
      for (int64_t j = 0; j < 3; ++j) {
        double dot = 0;
        for (int64_t k = 0; k < 4; ++k) dot += double(xi[k]) * x.f32()[b * 12 + j * 4 + k];
        EXPECT_NEAR(y.f32()[b * 21 + i * 7 + 4 + j], dot, 1e-5);  // FP32 sums of 4 products
      }
    }
  const auto r = gradient_check(*g, x);
  EXPECT_TRUE(r.ok) << r.report();
}

TEST(GatherLayer, RowsOfTheTableAndTheirGradients) {
  LayerDesc d = node("emb", LayerKind::GATHER, "Gather", {-1}, {{3}}, {3, 4});
  d.vocab = 5;
  d.out = 4;
  GatherLayer l(d, nullptr);
  std::mt19937_64 rng(6);
  l.init_parameters(rng);
  std::vector<Parameter*> ps;
  l.collect_parameters(ps);
  for (int64_t i = 0; i < 20; ++i) ps[0]->value.f32()[i] = float(i) * 0.1f;
  const Tensor ids = testing::tensor_from({2, 3}, {4, 0, 2, 2, 2, 1});
  const Tensor y = forward_eval(l, ids);
  for (int64_t p = 0; p < 6; ++p)
    for (int64_t c = 0; c < 4; ++c) EXPECT_FLOAT_EQ(y.f32()[p * 4 + c], (ids.f32()[p] * 4 + c) * 0.1f);
  GradientCheckOptions opt;
  opt.check_input = false;  // token ids
  const auto r = gradient_check(l, ids, opt);
  EXPECT_TRUE(r.ok) << r.report();
  StepContext ctx;
  EXPECT_THROW((void)l.forward(testing::tensor_from({1, 3}, {0, 5, 1}), ctx), std::invalid_argument);  // id >= vocab
}

TEST(AvgPool2dLayer, CountsThePaddingAndChecksGradients) {
  LayerDesc d = node("ap", LayerKind::AVGPOOL2D, "AveragePool", {-1}, {{2, 5, 5}}, {2, 3, 3});
  d.kernel = 3;
  d.stride = 2;
  d.padding = 1;
  AvgPool2dLayer l(d, nullptr);
  std::mt19937_64 rng(7);
  const Tensor x = testing::random_tensor({2, 2, 5, 5}, rng);
  const Tensor y = forward_eval(l, x);
  const float* p = x.f32();
  // corner (0, 0): the window covers rows/cols -1..1, four real cells, divided by 9
  EXPECT_NEAR(y.f32()[0], (p[0] + p[1] + p[5] + p[6]) / 9.0, 1e-6);
  // center (1, 1): rows/cols 1..3
  double s = 0;
  for (int h = 1; h <= 3; ++h)
    for (int w = 1; w <= 3; ++w) s += p[h * 5 + w];
  EXPECT_NEAR(y.f32()[4], s / 9.0, 1e-6);
  const auto r = gradient_check(l, x);
  EXPECT_TRUE(r.ok) << r.report();
}

// Pad of (2, 3, 4) by (0, 0) on C, (1, 2) on H and a crop (-1, 1) on W -> (2, 6, 4); its _ref is
// the plain formula y[c, h, w] = x[c, h - 1, w + 1] inside, 0 outside. A Split output is a crop.
TEST(PadLayer, ZeroPadsAndCropsEachAxisAndChecksGradients) {
  LayerDesc d = node("pad", LayerKind::PAD, "Pad", {-1}, {{2, 3, 4}}, {2, 6, 4});
  d.axes = {0, 1, -1, 0, 2, 1};
  PadLayer l(d, nullptr);
  std::mt19937_64 rng(8);
  const Tensor x = testing::random_tensor({2, 2, 3, 4}, rng);
  const Tensor y = forward_eval(l, x);
  ASSERT_EQ(y.shape(), (Shape{2, 2, 6, 4}));
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t c = 0; c < 2; ++c)
      for (int64_t h = 0; h < 6; ++h)
        for (int64_t w = 0; w < 4; ++w) {
          const int64_t hs = h - 1, ws = w + 1;
          const bool inside = hs >= 0 && hs < 3 && ws >= 0 && ws < 4;
          const float want = inside ? x.f32()[((b * 2 + c) * 3 + hs) * 4 + ws] : 0.0f;
          EXPECT_EQ(y.f32()[((b * 2 + c) * 6 + h) * 4 + w], want) << b << " " << c << " " << h << " " << w;
        }
  const auto r = gradient_check(l, x);
  EXPECT_TRUE(r.ok) << r.report();
  LayerDesc crop = node("split_1", LayerKind::PAD, "Split", {-1}, {{5}}, {2});  // entries 1..2 of 5
  crop.axes = {-1, -2};
  PadLayer part(crop, nullptr);
  const Tensor v = testing::tensor_from({1, 5}, {10, 11, 12, 13, 14});
  const Tensor got = forward_eval(part, v);
  EXPECT_EQ(got.f32()[0], 11.0f);
  EXPECT_EQ(got.f32()[1], 12.0f);
  LayerDesc wrong = d;
  wrong.out_shape = {2, 5, 4};
  EXPECT_THROW(PadLayer(wrong, nullptr), std::invalid_argument);
}

}  // namespace
}  // namespace qsync
