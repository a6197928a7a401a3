// File: tests/worker/tied_weights_test.cpp
// Tied weights of an ONNX model (planner/model_onnx.cpp tie_shared_initializers, GraphLayer's
// shared parameters): a GPT-style token embedding read by a Gather and, transposed, by the output
// MatMul is one parameter. Checked by hand: the forward is tanh(W[ids]) W^T with any W written into
// the one parameter; the gradient equals the sum of the two gradients of the same graph with the
// table copied into two initializers, and central differences of the loss.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "planner/model_onnx.h"
#include "tests/support/onnx_writer.h"
#include "worker/model.h"

namespace qsync {
namespace {

namespace w = qsync::onnx_writer;

constexpr int64_t V = 5, D = 4, T = 3, B = 2;

std::vector<float> table_values() {
  std::vector<float> v(size_t(V * D));
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.3f * std::sin(float(i) * 1.7f + 0.2f);
  return v;
}

// ids (B, T) -> Gather(wte) -> Tanh -> MatMul(Transpose(head_table)) -> logits (B, T, V); `tied`:
// the head reads "wte" itself, else a copy "wte_copy" of the same values.
std::string gpt_like(bool tied) {
  w::GraphSpec g;
  g.inputs = {w::value_info("ids", 7, {-1, T})};
  g.outputs = {w::value_info("logits", 1, {-1, T, V})};
  g.initializers = {w::tensor("wte", {V, D}, table_values())};
  if (!tied) g.initializers.push_back(w::tensor("wte_copy", {V, D}, table_values()));
  g.nodes = {w::node("Gather", "/wte/Gather", {"wte", "ids"}, {"e"}),
             w::node("Tanh", "/act/Tanh", {"e"}, {"h"}),
             w::node("Transpose", "/head/Transpose", {tied ? "wte" : "wte_copy"}, {"wt"}, {w::attr_ints("perm", {1, 0})}),
             w::node("MatMul", "/head/MatMul", {"h", "wt"}, {"logits"})};
  return w::model(g);
}

Tensor token_batch() {
  Tensor x = Tensor::empty({B, T}, Precision::FP32, nullptr);
  const float ids[B * T] = {0, 3, 4, 3, 1, 3};  // 3 read three times, 2 never
  std::copy(ids, ids + B * T, x.f32());
  return x;
}

// sum(logits * r): a loss whose gradient dlogits is r.
double weighted_loss(Model& m, const Tensor& x, const std::vector<float>& r) {
  StepContext ctx;
  ctx.training = false;
  const Tensor y = m.forward(x, ctx);
  double s = 0;
  for (int64_t i = 0; i < y.numel(); ++i) s += double(y.f32()[i]) * r[size_t(i)];
  return s;
}

std::vector<float> weights_r() {
  std::vector<float> r(size_t(B * T * V));
  std::mt19937_64 rng(3);
  std::normal_distribution<float> n(0.0f, 1.0f);
  for (float& v : r) v = n(rng);
  return r;
}

// The parameters' gradients after one backward of sum(logits * r).
void backward(Model& m, const Tensor& x, const std::vector<float>& r) {
  StepContext ctx;
  ctx.training = true;
  const Tensor y = m.forward(x, ctx);
  Tensor dy = Tensor::empty(y.shape(), Precision::FP32, nullptr);
  std::copy(r.begin(), r.end(), dy.f32());
  m.zero_grad();
  m.backward(dy, ctx);
}

TEST(TiedWeights, TheSharedTableIsOneParameterCountedOnce) {
  const ModelDesc tied = model_desc_from_onnx(gpt_like(true), "tied.onnx");
  const ModelDesc untied = model_desc_from_onnx(gpt_like(false), "untied.onnx");
  EXPECT_EQ(model_parameter_count(tied), V * D);
  EXPECT_EQ(model_parameter_count(untied), 2 * V * D);
  EXPECT_NE(tied.hash, untied.hash);
  const LayerDesc& head = tied.root.children.back();
  ASSERT_EQ(head.initial.size(), 1u);
  EXPECT_EQ(head.name, "head");
  EXPECT_TRUE(head.initial[0].tied);
  EXPECT_EQ(head.initial[0].name, "wte");
  Model m(tied, nullptr, 1);
  ASSERT_EQ(m.parameters().size(), 1u);
  EXPECT_EQ(m.parameters()[0]->name, "wte.Gather.weight") << "the first use owns the parameter";
  EXPECT_EQ(Model(untied, nullptr, 1).parameters().size(), 2u);
}

TEST(TiedWeights, ForwardReadsTheOneParameterInBothNodes) {
  Model m(model_desc_from_onnx(gpt_like(true), "tied.onnx"), nullptr, 1);
  Parameter& p = *m.parameters()[0];
  std::vector<float> w2(size_t(V * D));
  std::mt19937_64 rng(9);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (float& v : w2) v = u(rng);
  std::copy(w2.begin(), w2.end(), p.value.f32());  // a changed parameter: both nodes must see it
  const Tensor x = token_batch();
  StepContext ctx;
  ctx.training = false;
  const Tensor y = m.forward(x, ctx);
  for (int64_t s = 0; s < B * T; ++s) {
    const int64_t id = int64_t(x.f32()[s]);
    for (int64_t v = 0; v < V; ++v) {
      double want = 0;  // tanh(W[id]) . W[v]
      for (int64_t k = 0; k < D; ++k) want += std::tanh(double(w2[size_t(id * D + k)])) * w2[size_t(v * D + k)];
      EXPECT_NEAR(y.f32()[s * V + v], want, 1e-5) << "position " << s << ", logit " << v;
    }
  }
}

TEST(TiedWeights, GradientIsTheSumOfBothUsesAndMatchesCentralDifferences) {
  Model tied(model_desc_from_onnx(gpt_like(true), "tied.onnx"), nullptr, 1);
  Model untied(model_desc_from_onnx(gpt_like(false), "untied.onnx"), nullptr, 1);
  const Tensor x = token_batch();
  const std::vector<float> r = weights_r();
  backward(tied, x, r);
  backward(untied, x, r);
  const Parameter& g = *tied.parameters()[0];
  const Parameter& embed = *untied.parameters()[0];
  const Parameter& head = *untied.parameters()[1];
  double gather_part = 0;
  for (int64_t i = 0; i < V * D; ++i) {
    EXPECT_NEAR(g.grad.f32()[i], embed.grad.f32()[i] + head.grad.f32()[i], 1e-6) << "element " << i;
    gather_part += std::fabs(embed.grad.f32()[i]);
  }
  ASSERT_GT(gather_part, 0.1) << "the Gather's share of the gradient must be there to be summed";
  // Central differences of sum(logits * r) on every element (double sums of float logits: h 1e-2
  // keeps the rounding near 1e-5; the curvature error of tanh is O(h^2) = 1e-4 of the scale).
  Parameter& p = *tied.parameters()[0];
  const double h = 1e-2;
  for (int64_t i = 0; i < V * D; ++i) {
    const float keep = p.value.f32()[i];
    p.value.f32()[i] = float(keep + h);
    const double up = weighted_loss(tied, x, r);
    p.value.f32()[i] = float(keep - h);
    const double down = weighted_loss(tied, x, r);
    p.value.f32()[i] = keep;
    EXPECT_NEAR(g.grad.f32()[i], (up - down) / (2 * h), 2e-3) << "element " << i;
  }
}

TEST(TiedWeights, ASharedInitializerInAnotherLayoutIsRefused) {
  // V = D = 4: MatMul(e, wte) reads the table as (K, N), the transpose of the Gather's layout.
  w::GraphSpec g;
  std::vector<float> v(16);
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(i) * 0.1f;
  g.inputs = {w::value_info("ids", 7, {-1, 3})};
  g.outputs = {w::value_info("logits", 1, {-1, 3, 4})};
  g.initializers = {w::tensor("wte", {4, 4}, v)};
  g.nodes = {w::node("Gather", "/wte/Gather", {"wte", "ids"}, {"e"}), w::node("MatMul", "/head/MatMul", {"e", "wte"}, {"logits"})};
  try {
    (void)model_desc_from_onnx(w::model(g), "layout.onnx");
    FAIL() << "a table shared in two layouts was accepted";
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    for (const char* part : {"layout.onnx", "initializer 'wte'", "'wte.Gather' (Gather)", "'head' (MatMul)",
                             "another layout", "Transpose(weight)"})
      EXPECT_NE(msg.find(part), std::string::npos) << part << " in: " << msg;
  }
}

}  // namespace
}  // namespace qsync
