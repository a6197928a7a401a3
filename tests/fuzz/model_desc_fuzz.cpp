// File: tests/fuzz/model_desc_fuzz.cpp
// Fuzzes model descriptions (planner/model_desc.h: model_desc_parse, the YAML model files):
// layers, attributes, shape inference; then the tree queries the planner runs on a parsed model.
#include "planner/model_desc.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text = qsync::fuzz::as_string(data, size);
  qsync::fuzz::expect_clear_errors("model_desc_parse", [&] {
    const qsync::ModelDesc m = qsync::model_desc_parse(text, "fuzz-model.yaml");
    (void)qsync::model_gemm_layers(m);
    (void)qsync::model_leaf_layers(m);
    (void)qsync::model_parameter_count(m);
    (void)qsync::model_hash_string(m.hash);
  });
  return 0;
}
