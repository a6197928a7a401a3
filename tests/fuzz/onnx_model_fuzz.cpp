// File: tests/fuzz/onnx_model_fuzz.cpp
// Fuzzes ONNX models (planner/onnx/onnx_graph.h: parse_model, the protobuf wire decoding; then
// planner/model_onnx.h: model_desc_from_onnx, the mapping of the graph onto engine layers with
// shape inference, the op refusals and the fusions), seeded with the golden exports of
// tests/golden/onnx (ResNet-18, the encoder, the GPT; cut at MAX_LEN, so truncations are seeds).
#include "planner/model_onnx.h"
#include "planner/onnx/onnx_graph.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes = qsync::fuzz::as_string(data, size);
  qsync::fuzz::expect_clear_errors("onnx parse_model", [&] { (void)qsync::onnx::parse_model(bytes); });
  qsync::fuzz::expect_clear_errors("model_desc_from_onnx",
                                   [&] { (void)qsync::model_desc_from_onnx(bytes, "fuzz-model.onnx"); });
  return 0;
}
