// File: tests/fuzz/spd_plan_fuzz.cpp
// Fuzzes Sync-Point Drop plan files (planner/spd_plan.h: spd_plan_read) and the plan queries the
// tensor-parallel worker makes of a plan it read.
#include "planner/spd_plan.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static qsync::fuzz::ScratchFile file("spd_plan.json");
  qsync::fuzz::expect_clear_errors("spd_plan_read", [&] {
    const qsync::SpdPlan plan = qsync::spd_plan_read(file.write(data, size));
    (void)plan.dropped_mask();
    qsync::spd_plan_check_matches(plan, plan.model, plan.model_hash, plan.tp_degree);
  });
  return 0;
}
