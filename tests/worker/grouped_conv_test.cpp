// File: tests/worker/grouped_conv_test.cpp
// A grouped ONNX Conv (planner/model_onnx_conv.cpp: per group a channel crop and an engine conv2d
// of its weight slice, then a Concat): the layers and names the planner sees, the forward against
// the grouped convolution's formula written here (its _ref), and every weight and bias gradient
// against central differences. A group that does not divide the channels is refused.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "planner/model_onnx.h"
#include "tests/support/onnx_writer.h"
#include "worker/model.h"

namespace qsync {
namespace {

namespace w = qsync::onnx_writer;

constexpr int64_t B = 2, C = 4, O = 6, G = 2, H = 5, K = 3;

std::vector<float> values(size_t n, float scale, float phase) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * std::sin(float(i) * 0.9f + phase);
  return v;
}
const std::vector<float> WEIGHT = values(size_t(O * (C / G) * K * K), 0.4f, 0.1f), BIAS = values(size_t(O), 0.2f, 0.5f);

// input (B, 4, 5, 5) -> Conv group 2 (6 out, 3x3, pad 1) -> Flatten -> (B, 150) "classes"
std::string grouped_conv(int64_t group = G) {
  w::GraphSpec g;
  g.inputs = {w::value_info("input", 1, {-1, C, H, H})};
  g.outputs = {w::value_info("y", 1, {-1, O * H * H})};
  g.initializers = {w::tensor("conv.weight", {O, C / G, K, K}, WEIGHT), w::tensor("conv.bias", {O}, BIAS)};
  g.nodes = {w::node("Conv", "/conv/Conv", {"input", "conv.weight", "conv.bias"}, {"c"},
                     {w::attr_int("group", group), w::attr_ints("kernel_shape", {K, K}), w::attr_ints("pads", {1, 1, 1, 1})}),
             w::node("Flatten", "/Flatten", {"c"}, {"y"}, {w::attr_int("axis", 1)})};
  return w::model(g);
}

Tensor input_batch() {
  Tensor x = Tensor::empty({B, C, H, H}, Precision::FP32, nullptr);
  std::mt19937_64 rng(4);
  std::normal_distribution<float> n(0.0f, 1.0f);
  for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = n(rng);
  return x;
}

// The grouped convolution: output channel o reads the C/G input channels of its group.
double reference(const Tensor& x, int64_t b, int64_t o, int64_t h, int64_t wc) {
  const int64_t Cg = C / G, group = o / (O / G);
  double s = BIAS[size_t(o)];
  for (int64_t c = 0; c < Cg; ++c)
    for (int64_t i = 0; i < K; ++i)
      for (int64_t j = 0; j < K; ++j) {
        const int64_t hi = h + i - 1, wj = wc + j - 1;
        if (hi < 0 || hi >= H || wj < 0 || wj >= H) continue;
        s += double(WEIGHT[size_t(((o * Cg + c) * K + i) * K + j)]) * x.f32()[((b * C + group * Cg + c) * H + hi) * H + wj];
      }
  return s;
}

TEST(GroupedConv, BecomesOneEngineConvPerGroupWithItsWeightSlice) {
  const ModelDesc m = model_desc_from_onnx(grouped_conv(), "grouped.onnx");
  const auto gemms = model_gemm_layers(m);
  ASSERT_EQ(gemms.size(), 2u);
  EXPECT_EQ(gemms[0]->name, "conv.g0");
  EXPECT_EQ(gemms[1]->name, "conv.g1");
  EXPECT_EQ(gemms[1]->in_shape, (Shape{C / G, H, H}));
  EXPECT_EQ(gemms[1]->out, O / G);
  EXPECT_EQ(gemms[1]->initial.at(0).name, "conv.weight#g1");
  EXPECT_EQ(model_parameter_count(m), int64_t(WEIGHT.size() + BIAS.size()));
}

TEST(GroupedConv, ForwardIsTheGroupedConvolution) {
  Model m(model_desc_from_onnx(grouped_conv(), "grouped.onnx"), nullptr, 1);
  const Tensor x = input_batch();
  StepContext ctx;
  ctx.training = false;
  const Tensor y = m.forward(x, ctx);
  ASSERT_EQ(y.shape(), (Shape{B, O * H * H}));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t wc = 0; wc < H; ++wc)
          EXPECT_NEAR(y.f32()[((b * O + o) * H + h) * H + wc], reference(x, b, o, h, wc), 1e-5)
              << b << " " << o << " " << h << " " << wc;
}

TEST(GroupedConv, WeightAndBiasGradientsMatchCentralDifferences) {
  Model m(model_desc_from_onnx(grouped_conv(), "grouped.onnx"), nullptr, 1);
  const Tensor x = input_batch();
  std::vector<float> r(size_t(B * O * H * H));
  std::mt19937_64 rng(5);
  std::normal_distribution<float> n(0.0f, 1.0f);
  for (float& v : r) v = n(rng);
  auto loss = [&](bool training, Tensor* dy_out) {
    StepContext ctx;
    ctx.training = training;
    const Tensor y = m.forward(x, ctx);
    double s = 0;
    for (int64_t i = 0; i < y.numel(); ++i) s += double(y.f32()[i]) * r[size_t(i)];
    if (dy_out) {
      *dy_out = Tensor::empty(y.shape(), Precision::FP32, nullptr);
      std::copy(r.begin(), r.end(), dy_out->f32());
      m.zero_grad();
      m.backward(*dy_out, ctx);
    }
    return s;
  };
  Tensor dy;
  (void)loss(true, &dy);
  ASSERT_EQ(m.parameters().size(), 4u);  // weight and bias slices of both groups
  // The loss is linear in each weight: central differences are exact up to float rounding of the
  // 300 outputs (about 1e-4 at h = 1e-2).
  const double h = 1e-2;
  for (Parameter* p : m.parameters()) {
    for (int64_t i = 0; i < p->value.numel(); ++i) {
      const float keep = p->value.f32()[i];
      p->value.f32()[i] = float(keep + h);
      const double up = loss(false, nullptr);
      p->value.f32()[i] = float(keep - h);
      const double down = loss(false, nullptr);
      p->value.f32()[i] = keep;
      EXPECT_NEAR(p->grad.f32()[i], (up - down) / (2 * h), 1e-3) << p->name << "[" << i << "]";
    }
  }
}

TEST(GroupedConv, AGroupThatDoesNotDivideTheChannelsIsRefused) {
  try {
    (void)model_desc_from_onnx(grouped_conv(3), "bad.onnx");
    FAIL() << "group 3 of 4 channels was accepted";
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'/conv/Conv' (Conv)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("group 3 must divide"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace qsync
