// File: tests/planner/model_onnx_test.cpp
// ONNX graphs -> model descriptions (planner/model_onnx.h), on graphs written by
// tests/support/onnx_writer.h: names, shapes, fusion of a MatMul's bias Add, the task, and the
// refusals (unsupported ops with the node, its op and the supported list; a node without an
// output; a batch fixed by a Reshape; truncated files; several inputs), each naming the fix.
#include "planner/model_onnx.h"

#include <gtest/gtest.h>

#include "planner/onnx/onnx_graph.h"
#include "tests/planner/planner_test_support.h"
#include "tests/support/onnx_writer.h"

namespace qsync {
namespace {

namespace w = qsync::onnx_writer;
using qsync::testing::expect_error;

std::vector<float> filled(size_t n, float v = 0.1f) { return std::vector<float>(n, v); }

// input (B, 4) -> fc1 Gemm (8) -> Relu -> MatMul (8 -> 3) + Add bias -> logits (B, 3)
w::GraphSpec mlp() {
  w::GraphSpec g;
  g.inputs = {w::value_info("input", 1, {-1, 4})};
  g.outputs = {w::value_info("logits", 1, {-1, 3})};
  g.initializers = {w::tensor("fc1.weight", {8, 4}, filled(32)), w::tensor("fc1.bias", {8}, filled(8)),
                    w::tensor("fc2.w", {8, 3}, filled(24)), w::tensor("fc2.bias", {3}, filled(3))};
  g.nodes = {w::node("Gemm", "/fc1/Gemm", {"input", "fc1.weight", "fc1.bias"}, {"h"}, {w::attr_int("transB", 1)}),
             w::node("Relu", "/Relu", {"h"}, {"r"}),
             w::node("MatMul", "/fc2/MatMul", {"r", "fc2.w"}, {"m"}),
             w::node("Add", "/fc2/Add", {"fc2.bias", "m"}, {"logits"})};
  return g;
}

TEST(ModelOnnx, MapsNodesToNamedEngineLayers) {
  const ModelDesc m = model_desc_from_onnx(w::model(mlp()), "models/mlp.onnx");
  EXPECT_EQ(m.name, "mlp");
  EXPECT_EQ(m.task, ModelTask::CLASSIFICATION);
  EXPECT_EQ(m.classes, 3);
  EXPECT_EQ(m.input_shape, (Shape{4}));
  EXPECT_EQ(m.root.kind, LayerKind::GRAPH);
  ASSERT_EQ(m.root.children.size(), 3u);  // the bias Add is fused into fc2
  const auto gemms = model_gemm_layers(m);
  ASSERT_EQ(gemms.size(), 2u);
  EXPECT_EQ(gemms[0]->name, "fc1");
  EXPECT_EQ(gemms[1]->name, "fc2");
  EXPECT_TRUE(gemms[1]->bias);
  EXPECT_EQ(gemms[1]->out_shape, (Shape{3}));
  EXPECT_EQ(gemms[1]->initial.at(0).dims, (Shape{3, 8}));  // (K, N) MatMul weight stored (N, K)
  EXPECT_EQ(m.root.children[1].name, "Relu");
  EXPECT_EQ(m.root.children[1].graph_inputs, (std::vector<int>{0}));
  EXPECT_EQ(model_parameter_count(m), 8 * 4 + 8 + 8 * 3 + 3);
  // The hash names the structure: the same bytes hash the same, another width differs.
  EXPECT_EQ(model_desc_from_onnx(w::model(mlp()), "a.onnx").hash, model_desc_from_onnx(w::model(mlp()), "b.onnx").hash);
}

TEST(ModelOnnx, UnsupportedOpsAreAllNamedWithTheSupportedList) {
  w::GraphSpec g = mlp();
  g.nodes.insert(g.nodes.begin() + 2, w::node("Selu", "/act/Selu", {"r"}, {"s"}));
  g.nodes.push_back(w::node("LSTM", "/rnn/LSTM", {"logits"}, {"z"}));
  expect_error<std::invalid_argument>([&] { (void)model_desc_from_onnx(w::model(g), "bad.onnx"); },
                                      {"bad.onnx", "node '/act/Selu' (Selu)", "node '/rnn/LSTM' (LSTM)",
                                       "BatchNormalization", "Conv", "Where"});
}

TEST(ModelOnnx, ANodeWithoutAnOutputIsRefusedBeforeTheFusionsLookAtIt) {
  // PyTorch's erf GELU pattern whose last Mul names no output: the GELU fusion reads ahead to it
  // (before, an out_of_range escaped from there; the fuzzer's onnx_model finding of 2026-12-04).
  w::GraphSpec g;
  g.inputs = {w::value_info("input", 1, {-1, 4})};
  g.outputs = {w::value_info("logits", 1, {-1, 4})};
  g.initializers = {w::tensor("sqrt2", {}, {1.4142135f}), w::tensor("one", {}, {1.0f}), w::tensor("half", {}, {0.5f})};
  g.nodes = {w::node("Div", "/act/Div", {"input", "sqrt2"}, {"d"}), w::node("Erf", "/act/Erf", {"d"}, {"e"}),
             w::node("Add", "/act/Add", {"e", "one"}, {"a"}), w::node("Mul", "/act/Mul", {"input", "a"}, {"m"}),
             w::node("Mul", "/act/Mul_1", {"m", "half"}, {})};
  expect_error<std::invalid_argument>([&] { (void)model_desc_from_onnx(w::model(g), "gelu.onnx"); },
                                      {"gelu.onnx", "node '/act/Mul_1' (Mul)", "has no output", "re-export"});
}

TEST(ModelOnnx, TruncatedAndMalformedFilesNameTheFile) {
  const std::string bytes = w::model(mlp());
  for (size_t n : {size_t(0), size_t(3), bytes.size() / 2, bytes.size() - 1})
    expect_error<onnx::OnnxFormatError>([&] { (void)model_desc_from_onnx(bytes.substr(0, n), "cut.onnx"); },
                                        {"cut.onnx", "ONNX"});
}

TEST(ModelOnnx, CorruptedBytesAreRefusedAsInvalidArguments) {
  const std::string bytes = w::model(mlp());
  int accepted = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (uint8_t v : {uint8_t(0x00), uint8_t(0x7f), uint8_t(0xff)}) {
      std::string bad = bytes;
      bad[i] = char(v);
      try {
        (void)model_desc_from_onnx(bad, "bad.onnx");
        ++accepted;  // e.g. a changed weight value or name
      } catch (const std::invalid_argument&) {
      }
    }
  }
  EXPECT_LT(accepted, int(bytes.size() * 3));
}

TEST(ModelOnnx, AReshapeThatFixesTheBatchIsRefusedWithTheFix) {
  w::GraphSpec g;
  g.inputs = {w::value_info("input", 1, {-1, 2, 3})};
  g.outputs = {w::value_info("y", 1, {-1, 6})};
  g.initializers = {w::int_tensor("shape", {2}, {8, 6})};
  g.nodes = {w::node("Reshape", "/Reshape", {"input", "shape"}, {"y"})};
  expect_error<std::invalid_argument>([&] { (void)model_desc_from_onnx(w::model(g), "r.onnx"); },
                                      {"'/Reshape' (Reshape)", "fixes the batch to 8", "reshape(-1"});
  g.initializers = {w::int_tensor("shape", {2}, {-1, 6})};
  const ModelDesc m = model_desc_from_onnx(w::model(g), "r.onnx");
  EXPECT_EQ(m.root.children.at(0).out_shape, (Shape{6}));
}

TEST(ModelOnnx, GraphsOfSeveralInputsOrNonFloatImagesAreRefused) {
  w::GraphSpec g = mlp();
  g.inputs.push_back(w::value_info("mask", 1, {-1, 4}));
  expect_error<std::invalid_argument>([&] { (void)model_desc_from_onnx(w::model(g), "two.onnx"); },
                                      {"2 inputs", "single input"});
  w::GraphSpec d = mlp();
  d.inputs = {w::value_info("input", 1, {-1, -1})};
  expect_error<std::invalid_argument>([&] { (void)model_desc_from_onnx(w::model(d), "dyn.onnx"); },
                                      {"symbolic dimension 1", "only the batch"});
}

TEST(ModelOnnx, ConvPoolsAndResidualAddsInferShapes) {
  // (1, 8, 8) -> Conv 3x3 pad 1 (4) -> MaxPool 2 -> Add with itself -> GlobalAveragePool -> Flatten
  w::GraphSpec g;
  g.inputs = {w::value_info("input", 1, {-1, 1, 8, 8})};
  g.outputs = {w::value_info("y", 1, {-1, 4})};
  g.initializers = {w::tensor("c.weight", {4, 1, 3, 3}, filled(36))};
  g.nodes = {w::node("Conv", "/c/Conv", {"input", "c.weight"}, {"a"},
                     {w::attr_ints("kernel_shape", {3, 3}), w::attr_ints("pads", {1, 1, 1, 1})}),
             w::node("MaxPool", "/p/MaxPool", {"a"}, {"b"}, {w::attr_ints("kernel_shape", {2, 2}), w::attr_ints("strides", {2, 2})}),
             w::node("Add", "/Add", {"b", "b"}, {"c"}),
             w::node("GlobalAveragePool", "/g", {"c"}, {"d"}),
             w::node("Flatten", "/f", {"d"}, {"y"})};
  const ModelDesc m = model_desc_from_onnx(w::model(g), "cnn.onnx");
  ASSERT_EQ(m.root.children.size(), 6u);  // GlobalAveragePool is the pool and a (C, 1, 1) view
  EXPECT_EQ(m.root.children[0].name, "c");
  EXPECT_EQ(m.root.children[0].out_shape, (Shape{4, 8, 8}));
  EXPECT_EQ(m.root.children[1].out_shape, (Shape{4, 4, 4}));
  EXPECT_EQ(m.root.children[2].graph_inputs, (std::vector<int>{1, 1}));
  EXPECT_EQ(m.root.children[4].out_shape, (Shape{4, 1, 1}));
  EXPECT_EQ(m.classes, 4);
  // A zero stride (a division by zero in the shape) and a transpose that is not a permutation.
  g.nodes[1] = w::node("MaxPool", "/p/MaxPool", {"a"}, {"b"}, {w::attr_ints("kernel_shape", {2, 2}), w::attr_ints("strides", {0, 0})});
  expect_error<std::invalid_argument>([&] { (void)model_desc_from_onnx(w::model(g), "cnn.onnx"); },
                                      {"'/p/MaxPool' (MaxPool)", "stride must be at least 1"});
  g.nodes[1] = w::node("Transpose", "/t", {"a"}, {"b"}, {w::attr_ints("perm", {0, 1, 1, 2})});
  expect_error<std::invalid_argument>([&] { (void)model_desc_from_onnx(w::model(g), "cnn.onnx"); },
                                      {"'/t' (Transpose)", "not a permutation"});
  // Grouped and dilated convolutions are refused naming the node.
  g.nodes[0] = w::node("Conv", "/c/Conv", {"input", "c.weight"}, {"a"}, {w::attr_int("group", 2)});
  expect_error<std::invalid_argument>([&] { (void)model_desc_from_onnx(w::model(g), "cnn.onnx"); },
                                      {"'/c/Conv' (Conv)", "group"});
}

// F.pad (a Pad of constant zeros) and torch.split / chunk (Split, each output a crop read by its
// own consumers); reflect padding, a non-zero value and a padded batch are refused naming the fix.
TEST(ModelOnnx, PadAndSplitBecomePadLayers) {
  w::GraphSpec g;
  g.inputs = {w::value_info("input", 1, {-1, 6})};
  g.outputs = {w::value_info("y", 1, {-1, 4})};
  g.initializers = {w::int_tensor("pads", {4}, {0, 1, 0, 1}), w::int_tensor("sizes", {2}, {3, 5})};
  g.nodes = {w::node("Pad", "/Pad", {"input", "pads"}, {"p"}),                 // (8)
             w::node("Split", "/Split", {"p", "sizes"}, {"a", "b"}, {w::attr_int("axis", 1)}),  // (3), (5)
             w::node("Concat", "/Concat", {"a", "b"}, {"c"}, {w::attr_int("axis", 1)}),         // (8)
             w::node("Split", "/Split2", {"c"}, {"y", "z"}, {w::attr_int("axis", -1)})};       // equal: (4), (4)
  const ModelDesc m = model_desc_from_onnx(w::model(g), "pad.onnx");
  const auto& c = m.root.children;
  ASSERT_EQ(c.size(), 6u);  // Pad, 2 + 2 Split parts, Concat
  EXPECT_EQ(c[0].kind, LayerKind::PAD);
  EXPECT_EQ(c[0].out_shape, (Shape{8}));
  EXPECT_EQ(c[0].axes, (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(c[1].out_shape, (Shape{3}));
  EXPECT_EQ(c[1].axes, (std::vector<int64_t>{0, -5}));
  EXPECT_EQ(c[2].out_shape, (Shape{5}));
  EXPECT_EQ(c[2].axes, (std::vector<int64_t>{-3, 0}));
  EXPECT_EQ(c[2].graph_inputs, (std::vector<int>{0}));
  EXPECT_EQ(c[4].axes, (std::vector<int64_t>{0, -4}));
  EXPECT_EQ(c[5].axes, (std::vector<int64_t>{-4, 0}));
  EXPECT_EQ(m.root.graph_inputs, (std::vector<int>{4}));  // y: the first part of /Split2

  w::GraphSpec bad = g;
  bad.nodes[0] = w::node("Pad", "/Pad", {"input", "pads"}, {"p"}, {w::attr_string("mode", "reflect")});
  expect_error<std::invalid_argument>([&] { (void)model_desc_from_onnx(w::model(bad), "r.onnx"); },
                                      {"'/Pad' (Pad)", "mode 'reflect'", "zeros"});
  bad = g;
  bad.initializers[0] = w::int_tensor("pads", {4}, {1, 1, 0, 1});
  expect_error<std::invalid_argument>([&] { (void)model_desc_from_onnx(w::model(bad), "b.onnx"); },
                                      {"'/Pad' (Pad)", "batch"});
  bad = g;
  bad.initializers[1] = w::int_tensor("sizes", {2}, {3, 4});
  expect_error<std::invalid_argument>([&] { (void)model_desc_from_onnx(w::model(bad), "s.onnx"); },
                                      {"'/Split' (Split)", "summing to 8"});
}

}  // namespace
}  // namespace qsync
