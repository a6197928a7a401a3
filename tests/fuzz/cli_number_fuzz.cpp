// File: tests/fuzz/cli_number_fuzz.cpp
// Fuzzes the number readers of command lines and job fields: parse_int_flag, parse_double_flag
// (planner/cli_args.h), durations and memory quantities (planner/job_spec.h), SPD budgets and
// strategy names (planner/spd_plan.h). The first byte picks the reader.
#include "planner/cli_args.h"
#include "planner/job_spec.h"
#include "planner/spd_plan.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string text = qsync::fuzz::as_string(data + 1, size - 1);
  qsync::fuzz::expect_clear_errors("number readers", [&] {
    switch (data[0] % 6) {
      case 0: (void)qsync::parse_int_flag("--steps", text); break;
      case 1: (void)qsync::parse_double_flag("--lr", text); break;
      case 2: (void)qsync::parse_duration_seconds(text, "spec.run.collectiveTimeout"); break;
      case 3: (void)qsync::parse_memory_quantity(text, "spec.pool.local[0].memory"); break;
      case 4: (void)qsync::spd_budget_parse(text); break;
      default: (void)qsync::spd_strategy_from_name(text); break;
    }
  });
  return 0;
}
