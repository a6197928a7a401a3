// File: tests/fuzz/checkpoint_fuzz.cpp
// Fuzzes training checkpoints (worker/checkpoint.h: checkpoint_optimizer_kind, checkpoint_load)
// against a tiny model. The first input byte's low bit says whether to rewrite the trailing
// checksum over the rest, so the fuzzer reaches the header and tensor records past it; a load
// that fails must leave the model untouched.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kernels/device_class.h"
#include "planner/model_desc.h"
#include "tests/fuzz/fuzz_support.h"
#include "worker/byte_record.h"
#include "worker/checkpoint.h"

namespace {

const qsync::ModelDesc& tiny_model() {
  static const qsync::ModelDesc m = qsync::model_desc_load(QSYNC_FUZZ_TINY_MODEL);
  return m;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  qsync::device_class_activate(qsync::device_class_fallback(qsync::device_class_by_name("cpu-avx2")), 1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static qsync::fuzz::ScratchFile file("latest.qckpt");
  if (size == 0) return 0;
  std::string bytes = qsync::fuzz::as_string(data + 1, size - 1);
  if ((data[0] & 1) != 0 && bytes.size() >= sizeof(uint64_t)) {
    const uint64_t sum = qsync::fnv1a_64(bytes.data(), bytes.size() - sizeof sum);
    std::memcpy(bytes.data() + bytes.size() - sizeof sum, &sum, sizeof sum);
  }
  const std::string& path = file.write(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  qsync::OptimizerConfig config;
  qsync::fuzz::expect_clear_errors("checkpoint_optimizer_kind", [&] { config.kind = qsync::checkpoint_optimizer_kind(path); });
  qsync::MemoryAccount memory;
  qsync::Model model(tiny_model(), &memory, 1);
  qsync::Optimizer opt(config, model.parameters(), &memory);
  std::vector<float> before;
  for (qsync::Parameter* p : model.parameters()) before.insert(before.end(), p->value.f32(), p->value.f32() + p->value.numel());
  bool loaded = false;
  qsync::fuzz::expect_clear_errors("checkpoint_load", [&] {
    (void)qsync::checkpoint_load(path, model, opt);
    loaded = true;
  });
  if (!loaded) {
    std::vector<float> after;
    for (qsync::Parameter* p : model.parameters()) after.insert(after.end(), p->value.f32(), p->value.f32() + p->value.numel());
    if (std::memcmp(before.data(), after.data(), before.size() * sizeof(float)) != 0) {
      std::fprintf(stderr, "a checkpoint that failed to load changed the model's weights\n");
      std::abort();
    }
  }
  return 0;
}
