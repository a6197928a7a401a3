// File: tests/fuzz/job_file_fuzz.cpp
// Fuzzes job files (planner/job_spec.h: job_file_parse, the YAML manifest `qsync run` and
// qsync-plan read): errors must be clear, and a job that parses writes back (to_json) to a spec
// that reads back equal.
#include <cstdio>
#include <cstdlib>

#include "planner/job_spec.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text = qsync::fuzz::as_string(data, size);
  qsync::fuzz::expect_clear_errors("job_file_parse", [&] {
    const qsync::JobFile job = qsync::job_file_parse(text, "fuzz-job.yaml");
    (void)qsync::job_file_local_problems(job);
    const qsync::JobSpec again = qsync::job_spec_from_json(qsync::to_json(job.spec));
    if (!(again == job.spec)) {
      std::fprintf(stderr, "job spec does not survive to_json -> job_spec_from_json\n");
      std::abort();
    }
  });
  return 0;
}
