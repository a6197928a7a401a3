// File: tests/fuzz/hybrid_training_job_fuzz.cpp
// Fuzzes the operator's reading of a HybridTrainingJob object as the API server sends it (JSON:
// operator/api/hybrid_training_job.h) and the YAML-to-JSON step job files go through.
#include "operator/api/hybrid_training_job.h"
#include "planner/job_spec.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text = qsync::fuzz::as_string(data, size);
  const nlohmann::json object = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!object.is_discarded()) {
    qsync::fuzz::expect_clear_errors("hybrid_training_job_from_json", [&] {
      const qsync::api::HybridTrainingJob job = qsync::api::hybrid_training_job_from_json(object);
      (void)qsync::api::to_json(job);
      (void)job.name();
      (void)job.namespace_name();
      (void)job.generation();
    });
  } else {
    qsync::fuzz::expect_clear_errors("job_yaml_to_json", [&] { (void)qsync::job_yaml_to_json(text); });
  }
  return 0;
}
