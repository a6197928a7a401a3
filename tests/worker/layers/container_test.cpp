// Unit tests for worker/layers/container: Sequential and Residual (children built with a test
// factory, since the registry with the GEMM layers is not linked here).
#include <gtest/gtest.h>

#include <map>

#include "tests/worker/gradient_check.h"
#include "tests/worker/layers/layer_test_support.h"
#include "worker/layers/container.h"

namespace qsync::testing {
namespace {

LayerDesc child(const std::string& name, LayerKind kind, const Shape& in, const Shape& out) {
  LayerDesc d = make_desc(name, kind, in);
  d.out_shape = out;
  return d;
}

// tokens (T, C) -> layernorm -> gelu -> positional
LayerDesc token_block(const std::string& name, LayerKind kind, int64_t T, int64_t C) {
  LayerDesc d = make_desc(name, kind, {T, C});
  d.children = {child(name + ".ln", LayerKind::LAYERNORM, {T, C}, {T, C}),
                child(name + ".act", LayerKind::GELU, {T, C}, {T, C}),
                child(name + ".pos", LayerKind::POSITIONAL, {T, C}, {T, C})};
  return d;
}

void randomize_parameters(Layer& layer, std::mt19937_64& rng) {
  std::vector<Parameter*> params;
  layer.collect_parameters(params);
  std::uniform_real_distribution<float> u(0.5f, 1.5f);
  for (Parameter* p : params)
    for (int64_t i = 0; i < p->value.numel(); ++i) p->value.f32()[i] = u(rng);
}

TEST(SequentialLayer, RunsChildrenInOrder) {
  // (2, 4, 4) -> maxpool 2 -> (2, 2, 2) -> flatten -> (8) -> relu
  LayerDesc d = make_desc("net", LayerKind::SEQUENTIAL, {2, 4, 4});
  LayerDesc pool = child("pool", LayerKind::MAXPOOL2D, {2, 4, 4}, {2, 2, 2});
  pool.kernel = 2;
  pool.stride = 2;
  d.children = {pool, child("flat", LayerKind::FLATTEN, {2, 2, 2}, {8}), child("relu", LayerKind::RELU, {8}, {8})};
  SequentialLayer net(d, nullptr, test_layer_create);
  EXPECT_EQ(net.desc().out_shape, (Shape{8}));
  ASSERT_EQ(net.children().size(), 3u);

  std::mt19937_64 rng(21);
  Tensor x = random_tensor({3, 2, 4, 4}, rng);
  StepContext ctx;
  ctx.training = false;
  Tensor y = net.forward(x, ctx);
  // The same chain by hand.
  Tensor h = x;
  for (const auto& c : net.children()) h = c->forward(h, ctx);
  EXPECT_EQ(values_of(y), values_of(h));
  EXPECT_EQ(y.shape(), (Shape{3, 8}));
}

TEST(SequentialLayer, GradientCheckThroughChildren) {
  std::mt19937_64 rng(22);
  SequentialLayer net(token_block("seq", LayerKind::SEQUENTIAL, 4, 5), nullptr, test_layer_create);
  randomize_parameters(net, rng);
  GradientCheckResult r = gradient_check(net, random_tensor({2, 4, 5}, rng, -2.0f, 2.0f));
  EXPECT_TRUE(r.ok) << r.report();
  EXPECT_EQ(r.tensors.size(), 4u);  // input, ln.weight, ln.bias, pos.weight
}

TEST(SequentialLayer, ParametersInitAndMemoryRecurse) {
  MemoryAccount account;
  LayerDesc outer = make_desc("outer", LayerKind::SEQUENTIAL, {4, 5});
  outer.children = {token_block("inner", LayerKind::SEQUENTIAL, 4, 5), child("tail", LayerKind::LAYERNORM, {4, 5}, {4, 5})};
  SequentialLayer net(outer, &account, test_layer_create);
  std::vector<Parameter*> params;
  net.collect_parameters(params);
  std::vector<std::string> names;
  for (Parameter* p : params) names.push_back(p->name);
  EXPECT_EQ(names, (std::vector<std::string>{"inner.ln.weight", "inner.ln.bias", "inner.pos.weight", "tail.weight",
                                             "tail.bias"}));
  EXPECT_EQ(account.current_bytes(), parameter_bytes(net));

  // init_parameters walks the children in order with one rng: the same seed, the same weights.
  SequentialLayer twin(outer, nullptr, test_layer_create);
  std::mt19937_64 a(5), b(5);
  net.init_parameters(a);
  twin.init_parameters(b);
  std::vector<Parameter*> twin_params;
  twin.collect_parameters(twin_params);
  for (size_t i = 0; i < params.size(); ++i) EXPECT_EQ(values_of(params[i]->value), values_of(twin_params[i]->value));

  std::mt19937_64 rng(23);
  const int64_t saved = check_step_memory(net, random_tensor({2, 4, 5}, rng));
  // inner.ln: xhat + rstd, inner.act: its input, tail: xhat + rstd.
  EXPECT_EQ(saved, 2 * (2 * 4 * 5 + 2 * 4) * 4 + 2 * 4 * 5 * 4);
  EXPECT_EQ(account.current_bytes(), parameter_bytes(net));
}

TEST(SequentialLayer, MismatchedChildrenAreRejected) {
  LayerDesc d = make_desc("net", LayerKind::SEQUENTIAL, {6});
  d.children = {child("a", LayerKind::RELU, {6}, {6}), child("b", LayerKind::GELU, {5}, {5})};
  try {
    SequentialLayer net(d, nullptr, test_layer_create);
    FAIL() << "expected a shape error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'a' outputs (6)"), std::string::npos) << e.what();
  }
}

TEST(SequentialLayer, TimesLeafChildren) {
  struct Recorder : OpTimer {
    std::map<std::string, int> calls;
    void record(const std::string& op, double seconds) override {
      EXPECT_GE(seconds, 0.0);
      ++calls[op];
    }
  } timer;
  LayerDesc outer = make_desc("outer", LayerKind::SEQUENTIAL, {4, 5});
  outer.children = {token_block("inner", LayerKind::RESIDUAL, 4, 5)};
  SequentialLayer net(outer, nullptr, test_layer_create);
  std::mt19937_64 rng(24);
  StepContext ctx;
  ctx.timer = &timer;
  Tensor y = net.forward(random_tensor({2, 4, 5}, rng), ctx);
  net.backward(y, ctx);
  EXPECT_EQ(timer.calls, (std::map<std::string, int>{{"inner.act.backward", 1}, {"inner.act.forward", 1},
                                                     {"inner.ln.backward", 1}, {"inner.ln.forward", 1},
                                                     {"inner.pos.backward", 1}, {"inner.pos.forward", 1}}));
}

TEST(ResidualLayer, ZeroBodyIsIdentity) {
  // body = dropout with p = 1: body(x) = 0, so y = x and dx = dy exactly.
  LayerDesc d = make_desc("res", LayerKind::RESIDUAL, {3, 4});
  LayerDesc drop = child("res.drop", LayerKind::DROPOUT, {3, 4}, {3, 4});
  drop.p = 1.0;
  d.children = {drop};
  ResidualLayer res(d, nullptr, test_layer_create);
  std::mt19937_64 rng(25);
  Tensor x = random_tensor({2, 3, 4}, rng);
  StepContext ctx;
  Tensor y = res.forward(x, ctx);
  EXPECT_EQ(values_of(y), values_of(x));
  Tensor dy = random_tensor({2, 3, 4}, rng);
  EXPECT_EQ(values_of(res.backward(dy, ctx)), values_of(dy));
}

TEST(ResidualLayer, AddsBodyAndGradientChecks) {
  std::mt19937_64 rng(26);
  ResidualLayer res(token_block("res", LayerKind::RESIDUAL, 3, 6), nullptr, test_layer_create);
  randomize_parameters(res, rng);
  Tensor x = random_tensor({2, 3, 6}, rng, -2.0f, 2.0f);
  StepContext ctx;
  ctx.training = false;
  Tensor y = res.forward(x, ctx);
  Tensor own = res.body().forward(x, ctx);
  for (int64_t i = 0; i < x.numel(); ++i) EXPECT_EQ(y.f32()[i], x.f32()[i] + own.f32()[i]) << i;

  GradientCheckResult r = gradient_check(res, x);
  EXPECT_TRUE(r.ok) << r.report();
  EXPECT_GT(check_step_memory(res, x), 0);
}

TEST(ResidualLayer, BodyMustKeepTheShape) {
  LayerDesc d = make_desc("res", LayerKind::RESIDUAL, {2, 2, 2});
  d.children = {child("res.flat", LayerKind::FLATTEN, {2, 2, 2}, {8})};
  EXPECT_THROW(ResidualLayer(d, nullptr, test_layer_create), std::invalid_argument);
}

}  // namespace
}  // namespace qsync::testing
