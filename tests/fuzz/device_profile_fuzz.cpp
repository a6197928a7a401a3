// File: tests/fuzz/device_profile_fuzz.cpp
// Fuzzes device profiles and comm profiles (planner/device_profile.h): the JSON reader, the
// checks against a model, and the scaling the planner applies to a profile of another batch.
#include "planner/device_profile.h"
#include "planner/model_desc.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const qsync::ModelDesc mlp = qsync::model_desc_load(QSYNC_FUZZ_MODELS_DIR "/mlp.yaml");
  static qsync::fuzz::ScratchFile comm_file("comm.json");
  const std::string text = qsync::fuzz::as_string(data, size);
  qsync::fuzz::expect_clear_errors("device_profile_from_json", [&] {
    const qsync::DeviceProfile p = qsync::device_profile_from_json(text, "fuzz-profile.json");
    (void)qsync::device_profile_to_json(p);
    qsync::device_profile_check(p, mlp, p.batch > 0 ? p.batch : 1, "fuzz-profile.json");
    (void)qsync::device_profile_scaled(p, 2 * (p.batch > 0 ? p.batch : 1));
  });
  qsync::fuzz::expect_clear_errors("comm_profile_load", [&] {
    const qsync::CommProfile c = qsync::comm_profile_load(comm_file.write(data, size));
    (void)qsync::comm_profile_rescaled(c, 4);
  });
  return 0;
}
