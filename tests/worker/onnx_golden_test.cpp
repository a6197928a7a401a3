// File: tests/worker/onnx_golden_test.cpp
// Models exported from PyTorch as ONNX (tests/golden/onnx/*.onnx, written with their goldens by
// /usr/bin/python3 tools/export_onnx.py --golden tests/golden/onnx): the engine's model built from
// each graph, on PyTorch's weights and batch, against PyTorch's logits, loss, every parameter's
// gradient (by initializer name) and the logits after one SGD step. Training mode throughout
// (batch-statistics BatchNorm, dropout 0 in the goldens).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "planner/model_onnx.h"
#include "worker/model.h"

namespace qsync {
namespace {

nlohmann::json load_golden(const std::string& name) {
  std::ifstream f(std::string(QSYNC_ONNX_GOLDEN_DIR) + "/" + name + ".json");
  if (!f) throw std::runtime_error("missing golden " + name + ".json");
  return nlohmann::json::parse(f);
}

// max |a - b| / max(1, max |b|): errors relative to the tensor's scale.
double scaled_error(const float* a, const std::vector<float>& b) {
  double worst = 0, scale = 1;
  for (float v : b) scale = std::max(scale, double(std::fabs(v)));
  for (size_t i = 0; i < b.size(); ++i) worst = std::max(worst, std::fabs(double(a[i]) - b[i]));
  return worst / scale;
}

// Mean cross-entropy over the rows of logits (P, V) and its gradient.
double xent(const Tensor& logits, const std::vector<int>& targets, Tensor& dlogits) {
  const int64_t V = logits.shape().back(), P = logits.numel() / V;
  double loss = 0;
  for (int64_t r = 0; r < P; ++r) {
    const float* z = logits.f32() + r * V;
    float* g = dlogits.f32() + r * V;
    double m = z[0], sum = 0;
    for (int64_t j = 1; j < V; ++j) m = std::max(m, double(z[j]));
    for (int64_t j = 0; j < V; ++j) sum += std::exp(z[j] - m);
    loss += std::log(sum) + m - z[targets[size_t(r)]];
    for (int64_t j = 0; j < V; ++j) g[j] = float((std::exp(z[j] - m) / sum - (j == targets[size_t(r)])) / double(P));
  }
  return loss / double(P);
}

void check_model(const std::string& name) {
  const nlohmann::json g = load_golden(name);
  const ModelDesc desc = model_desc_find(std::string(QSYNC_ONNX_GOLDEN_DIR) + "/" + name + ".onnx");
  Model model(desc, nullptr, 1);
  Shape in_shape = g["input_shape"].get<Shape>();
  Tensor x = Tensor::empty(in_shape, Precision::FP32, nullptr);
  const std::vector<float> input = g["input"].get<std::vector<float>>();
  std::copy(input.begin(), input.end(), x.f32());
  StepContext ctx;
  ctx.training = true;
  Tensor logits = model.forward(x, ctx);
  const std::vector<float> want_logits = g["logits"].get<std::vector<float>>();
  ASSERT_EQ(logits.numel(), int64_t(want_logits.size()));
  // FP32 both sides, summed in other orders (oneDNN GEMMs, our loops vs PyTorch's kernels):
  // 1e-4 of the logits' scale is ~100x the float rounding of these depths.
  EXPECT_LT(scaled_error(logits.f32(), want_logits), 1e-4) << name << " logits";
  Tensor dlogits = Tensor::empty(logits.shape(), Precision::FP32, nullptr);
  const double loss = xent(logits, g["targets"].get<std::vector<int>>(), dlogits);
  EXPECT_NEAR(loss, g["loss"].get<double>(), 1e-5) << name << " loss";
  model.zero_grad();
  model.backward(dlogits, ctx);
  // Gradients by initializer name (the parameters' ONNX names; transposed MatMul weights are the
  // same torch parameter). The tolerance: backward doubles the depth of sums, 1e-3 of the scale.
  std::map<std::string, const Parameter*> by_source;
  std::vector<const LayerDesc*> leaves = model_leaf_layers(desc);
  std::vector<Parameter*> params = model.parameters();
  size_t at = 0;
  for (const LayerDesc* l : leaves)
    for (const GraphTensor& t : l->initial) by_source[t.name] = params.at(at++);
  ASSERT_EQ(at, params.size());
  int compared = 0;
  for (const auto& [torch_name, grad] : g["grads"].items()) {
    const auto it = by_source.find(torch_name);
    ASSERT_NE(it, by_source.end()) << name << ": no parameter from initializer " << torch_name;
    const std::vector<float> want = grad.get<std::vector<float>>();
    ASSERT_EQ(it->second->grad.numel(), int64_t(want.size())) << torch_name;
    EXPECT_LT(scaled_error(it->second->grad.f32(), want), 1e-3) << name << " grad of " << torch_name;
    ++compared;
  }
  EXPECT_EQ(compared, int(params.size())) << "every parameter has a PyTorch gradient";
  // One SGD step, then the same batch again.
  const float lr = g["lr"].get<float>();
  for (Parameter* p : params)
    for (int64_t i = 0; i < p->value.numel(); ++i) p->value.f32()[i] -= lr * p->grad.f32()[i];
  Tensor after = model.forward(x, ctx);
  EXPECT_LT(scaled_error(after.f32(), g["logits_after_step"].get<std::vector<float>>()), 1e-3) << name << " after a step";
}

TEST(OnnxGolden, ResNet18) { check_model("resnet18"); }
TEST(OnnxGolden, Encoder) { check_model("encoder"); }
TEST(OnnxGolden, Gpt) { check_model("gpt"); }

TEST(OnnxGolden, PlannerSeesTheGraphLayers) {
  const ModelDesc m = model_desc_find(std::string(QSYNC_ONNX_GOLDEN_DIR) + "/resnet18.onnx");
  EXPECT_EQ(m.task, ModelTask::CLASSIFICATION);
  EXPECT_EQ(m.classes, 10);
  EXPECT_EQ(m.input_shape, (Shape{1, 32, 32}));
  std::vector<std::string> gemms;
  for (const LayerDesc* l : model_gemm_layers(m)) gemms.push_back(l->name);
  // 1 stem conv + 16 block convs + 3 shortcut convs + fc
  EXPECT_EQ(gemms.size(), 21u);
  EXPECT_EQ(gemms.front(), "conv1");
  EXPECT_EQ(gemms.back(), "fc");
  EXPECT_NE(std::find(gemms.begin(), gemms.end(), "layer1.layer1.0.conv1"), gemms.end());
  const ModelDesc gpt = model_desc_find(std::string(QSYNC_ONNX_GOLDEN_DIR) + "/gpt.onnx");
  EXPECT_EQ(gpt.task, ModelTask::LANGUAGE_MODEL);
  EXPECT_EQ(gpt.vocab, 96);
  int gelus = 0, erfs = 0;  // PyTorch's erf GELU pattern (Div, Erf, Add, Mul, Mul) became one gelu layer per block
  for (const LayerDesc* l : model_leaf_layers(gpt)) {
    gelus += l->kind == LayerKind::GELU;
    erfs += l->op == "Erf";
  }
  EXPECT_EQ(gelus, 2);
  EXPECT_EQ(erfs, 0);
}

}  // namespace
}  // namespace qsync
