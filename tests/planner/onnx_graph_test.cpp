// File: tests/planner/onnx_graph_test.cpp
// The ONNX reader (planner/onnx/onnx_graph.h): a model written by tests/support/onnx_writer.h
// decodes back field for field; every truncation and a corrupted byte anywhere give an
// OnnxFormatError naming a byte offset (never a crash or another exception type); empty packed
// lists decode empty.
#include "planner/onnx/onnx_graph.h"

#include <gtest/gtest.h>

#include "tests/support/onnx_writer.h"

namespace qsync::onnx {
namespace {

namespace w = qsync::onnx_writer;

std::string small_model() {
  w::GraphSpec g;
  g.inputs = {w::value_info("input", 1, {-1, 4})};
  g.outputs = {w::value_info("logits", 1, {-1, 3})};
  g.initializers = {w::tensor("fc.weight", {3, 4}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}),
                    w::tensor("fc.bias", {3}, {0.5f, -0.5f, 0.25f}),
                    w::int_tensor("shape", {2}, {-1, 3})};
  g.nodes = {w::node("Gemm", "/fc/Gemm", {"input", "fc.weight", "fc.bias"}, {"h"},
                     {w::attr_int("transB", 1), w::attr_float("alpha", 1.0f)}),
             w::node("Transpose", "/t", {"h"}, {"logits"}, {w::attr_ints("perm", {0, 1})})};
  return w::model(g);
}

TEST(OnnxGraph, DecodesNodesInitializersAndValueInfos) {
  const Model m = parse_model(small_model());
  EXPECT_EQ(m.ir_version, 8);
  EXPECT_EQ(m.opset, 17);
  EXPECT_EQ(m.producer_name, "qsync-test");
  ASSERT_EQ(m.graph.nodes.size(), 2u);
  const Node& gemm = m.graph.nodes[0];
  EXPECT_EQ(gemm.op_type, "Gemm");
  EXPECT_EQ(gemm.name, "/fc/Gemm");
  EXPECT_EQ(gemm.inputs, (std::vector<std::string>{"input", "fc.weight", "fc.bias"}));
  ASSERT_NE(gemm.attribute("transB"), nullptr);
  EXPECT_EQ(gemm.attribute("transB")->i, 1);
  EXPECT_FLOAT_EQ(gemm.attribute("alpha")->f, 1.0f);
  EXPECT_EQ(gemm.attribute("missing"), nullptr);
  EXPECT_EQ(m.graph.nodes[1].attribute("perm")->ints, (std::vector<int64_t>{0, 1}));
  ASSERT_EQ(m.graph.initializers.size(), 3u);
  EXPECT_EQ(m.graph.initializers[0]->dims, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(m.graph.initializers[0]->floats.size(), 12u);
  EXPECT_FLOAT_EQ(m.graph.initializers[0]->floats[11], 12.0f);
  EXPECT_EQ(m.graph.initializers[2]->ints, (std::vector<int64_t>{-1, 3}));
  ASSERT_EQ(m.graph.inputs.size(), 1u);
  EXPECT_EQ(m.graph.inputs[0].dims, (std::vector<int64_t>{-1, 4}));
  EXPECT_EQ(m.graph.inputs[0].elem_type, 1);
}

TEST(OnnxGraph, EmptyPackedListsDecodeEmpty) {
  // A packed list of length 0 (an empty `floats` or `ints`) copied nothing from a null pointer
  // (UBSan, through the onnx_model fuzz target): it decodes as an empty list.
  w::GraphSpec g;
  g.inputs = {w::value_info("input", 1, {-1, 4})};
  g.outputs = {w::value_info("y", 1, {-1, 4})};
  g.nodes = {w::node("Resize", "/r", {"input"}, {"y"},
                     {w::attr_floats("scales", {}), w::attr_ints("axes", {}), w::attr_floats("two", {1.5f, -2.0f})})};
  const Model m = parse_model(w::model(g));
  ASSERT_EQ(m.graph.nodes.size(), 1u);
  const Node& n = m.graph.nodes[0];
  ASSERT_NE(n.attribute("scales"), nullptr);
  EXPECT_TRUE(n.attribute("scales")->floats.empty());
  ASSERT_NE(n.attribute("axes"), nullptr);
  EXPECT_TRUE(n.attribute("axes")->ints.empty());
  ASSERT_NE(n.attribute("two"), nullptr);
  EXPECT_EQ(n.attribute("two")->floats, (std::vector<float>{1.5f, -2.0f}));
}

TEST(OnnxGraph, EveryTruncationIsAFormatErrorWithAnOffset) {
  const std::string bytes = small_model();
  for (size_t n = 0; n < bytes.size(); ++n) {
    try {
      (void)parse_model(std::string_view(bytes).substr(0, n));
      ADD_FAILURE() << "a model cut to " << n << " of " << bytes.size() << " bytes was accepted";
    } catch (const OnnxFormatError& e) {
      EXPECT_NE(std::string(e.what()).find("ONNX"), std::string::npos) << e.what();
    }
  }
}

TEST(OnnxGraph, CorruptedBytesNeverCrash) {
  const std::string bytes = small_model();
  int errors = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (uint8_t v : {uint8_t(0xff), uint8_t(0x00), uint8_t(0x07)}) {
      std::string bad = bytes;
      bad[i] = char(v);
      try {
        (void)parse_model(bad);
      } catch (const OnnxFormatError&) {
        ++errors;
      }
    }
  }
  EXPECT_GT(errors, 0);  // some corruptions still decode (a changed name); the rest are refused cleanly
}

TEST(OnnxGraph, ErrorsNameTheFieldAndOffset) {
  // An initializer whose raw_data is shorter than its dims need.
  w::GraphSpec g;
  std::string t = w::tensor("w", {3, 4}, {1, 2, 3});
  g.initializers = {t};
  try {
    (void)parse_model(w::model(g));
    FAIL() << "accepted a tensor with too few bytes";
  } catch (const OnnxFormatError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("ModelProto.graph.initializer[0]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("byte "), std::string::npos) << msg;
    EXPECT_NE(msg.find("'w'"), std::string::npos) << msg;
  }
  EXPECT_THROW((void)parse_model(""), OnnxFormatError);
  EXPECT_THROW((void)parse_model("not an onnx file at all"), OnnxFormatError);
}

TEST(OnnxGraph, ExternalDataIsRefusedWithTheFix) {
  std::string t;
  w::int_field(t, 1, 2);
  w::int_field(t, 2, 1);
  w::bytes_field(t, 8, "big");
  w::bytes_field(t, 13, "location");
  w::GraphSpec g;
  g.initializers = {t};
  try {
    (void)parse_model(w::model(g));
    FAIL();
  } catch (const OnnxFormatError& e) {
    EXPECT_NE(std::string(e.what()).find("external"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace qsync::onnx
