// File: tests/fuzz/calibration_stats_fuzz.cpp
// Fuzzes calibration stats files (planner/indicator.h: calibration_stats_parse), their check
// against the MLP, and the indicator tables the allocator computes from them.
#include "planner/indicator.h"
#include "planner/model_desc.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const qsync::ModelDesc mlp = qsync::model_desc_load(QSYNC_FUZZ_MODELS_DIR "/mlp.yaml");
  const std::string text = qsync::fuzz::as_string(data, size);
  qsync::fuzz::expect_clear_errors("calibration_stats_parse", [&] {
    const qsync::CalibrationStats s = qsync::calibration_stats_parse(text, "fuzz-calibration.json");
    (void)qsync::calibration_stats_to_json(s);
    qsync::calibration_stats_check(s, mlp);
    (void)qsync::indicator_table(s, qsync::IndicatorKind::BIDIRECTIONAL);
    (void)qsync::indicator_table(s, qsync::IndicatorKind::WEIGHT_ERROR);
  });
  return 0;
}
