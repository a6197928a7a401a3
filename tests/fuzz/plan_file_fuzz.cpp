// File: tests/fuzz/plan_file_fuzz.cpp
// Fuzzes per-rank plan files (planner/plan_file.h: plan_parse) against the MLP and the CNN of
// examples/models (the first input byte picks one); a plan that parses writes back to YAML that
// parses to the same plan.
#include <cstdio>
#include <cstdlib>

#include "planner/model_desc.h"
#include "planner/plan_file.h"
#include "tests/fuzz/fuzz_support.h"

namespace {
const qsync::ModelDesc& model(int which) {
  static const qsync::ModelDesc mlp = qsync::model_desc_load(QSYNC_FUZZ_MODELS_DIR "/mlp.yaml");
  static const qsync::ModelDesc cnn = qsync::model_desc_load(QSYNC_FUZZ_MODELS_DIR "/cnn.yaml");
  return which == 0 ? mlp : cnn;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const qsync::ModelDesc& m = model(data[0] & 1);
  const std::string text = qsync::fuzz::as_string(data + 1, size - 1);
  qsync::fuzz::expect_clear_errors("plan_parse", [&] {
    const qsync::RankPlan plan = qsync::plan_parse(text, "fuzz-rank.plan", m);
    const qsync::RankPlan again = qsync::plan_parse(qsync::plan_to_yaml(plan), "fuzz-rank-again.plan", m);
    if (again.layers != plan.layers || again.default_precision != plan.default_precision ||
        again.local_batch != plan.local_batch || again.device_class != plan.device_class) {
      std::fprintf(stderr, "plan does not survive plan_to_yaml -> plan_parse\n");
      std::abort();
    }
  });
  return 0;
}
