// File: tests/worker/checkpoint_running_stats_test.cpp
// Checkpoints keep BatchNorm's running statistics (format version 3): an exact round trip on the
// ONNX ResNet-18 golden model (tests/golden/onnx/resnet18.onnx, 20 BatchNorm layers); a version 2
// file of the same model (the layout without the running-statistics section) still loads, restores
// the weights, keeps the model's own statistics and reports version 2; a buffer of another name
// is refused naming both.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "planner/atomic_file.h"
#include "worker/byte_record.h"
#include "worker/checkpoint.h"

namespace qsync {
namespace {

namespace fs = std::filesystem;

ModelDesc resnet() {
  std::string path = QSYNC_ONNX_GOLDEN_DIR;  // (appended: GCC 12 warns falsely on a temporary's operator+)
  path += "/resnet18.onnx";
  return model_desc_find(path);
}

std::vector<std::vector<float>> buffers_of(const Model& m) {
  std::vector<std::vector<float>> out;
  for (RunningStatistics* r : m.running_statistics())
    for (const RunningStatistics::Buffer& b : r->buffers()) out.push_back(*b.values);
  return out;
}
std::vector<std::vector<float>> weights_of(const Model& m) {
  std::vector<std::vector<float>> out;
  for (const Parameter* p : m.parameters()) out.emplace_back(p->value.f32(), p->value.f32() + p->value.numel());
  return out;
}
bool same_bits(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].size() != b[i].size() || std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)) != 0) return false;
  return true;
}
void fill_buffers(Model& m, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(0.5f, 2.0f);
  for (RunningStatistics* r : m.running_statistics())
    for (const RunningStatistics::Buffer& b : r->buffers())
      for (float& v : *b.values) v = u(rng);
}

struct TempFile {
  std::string path = (fs::temp_directory_path() / ("qsync_ckpt_rs_" + std::to_string(getpid()) + "_" +
                                                   ::testing::UnitTest::GetInstance()->current_test_info()->name()))
                         .string();
  ~TempFile() { fs::remove(path); }
};

// A saved checkpoint of ResNet-18 with random running statistics.
struct Saved {
  ModelDesc desc = resnet();
  MemoryAccount memory;
  Model model{desc, &memory, 1};
  Optimizer opt{OptimizerConfig{}, model.parameters(), &memory};
  explicit Saved(const std::string& path) {
    fill_buffers(model, 7);
    checkpoint_save(path, model, opt, {3, 0, 3, 1, desc.hash, {}});
  }
};

// The bytes of the running-statistics section (u32 count, then the records) of `m`'s checkpoint.
size_t buffer_section_bytes(const Model& m) {
  size_t n = sizeof(uint32_t);
  for (RunningStatistics* r : m.running_statistics())
    for (const RunningStatistics::Buffer& b : r->buffers())
      n += sizeof(uint32_t) + b.name.size() + sizeof(int64_t) + b.values->size() * sizeof(float);
  return n;
}

// `body` (the file without its checksum) with `version` and a fresh checksum.
std::string resealed(std::string body, uint32_t version) {
  std::memcpy(&body[8], &version, sizeof version);
  const uint64_t sum = fnv1a_64(body.data(), body.size());
  return body + std::string(reinterpret_cast<const char*>(&sum), sizeof sum);
}

TEST(CheckpointRunningStatistics, RoundTripRestoresRunningStatisticsExactly) {
  TempFile f;
  const Saved saved(f.path);
  ASSERT_EQ(saved.model.running_statistics().size(), 20u);  // ResNet-18: 20 BatchNorm layers
  MemoryAccount memory;
  Model b(saved.desc, &memory, 2);
  Optimizer opt(OptimizerConfig{}, b.parameters(), &memory);
  ASSERT_FALSE(same_bits(buffers_of(saved.model), buffers_of(b)));
  const CheckpointMeta meta = checkpoint_load(f.path, b, opt);
  EXPECT_EQ(meta.version, CHECKPOINT_VERSION);
  EXPECT_TRUE(same_bits(buffers_of(saved.model), buffers_of(b)));
  EXPECT_TRUE(same_bits(weights_of(saved.model), weights_of(b)));
}

TEST(CheckpointRunningStatistics, Version2FileLoadsAndKeepsTheModelsStatistics) {
  TempFile f;
  const Saved saved(f.path);
  const std::string bytes = file_read_all(f.path);
  const size_t body = bytes.size() - sizeof(uint64_t) - buffer_section_bytes(saved.model);
  std::ofstream(f.path, std::ios::binary | std::ios::trunc) << resealed(bytes.substr(0, body), 2);
  MemoryAccount memory;
  Model b(saved.desc, &memory, 2);
  Optimizer opt(OptimizerConfig{}, b.parameters(), &memory);
  const std::vector<std::vector<float>> own = buffers_of(b);
  const CheckpointMeta meta = checkpoint_load(f.path, b, opt);
  EXPECT_EQ(meta.version, 2u);
  EXPECT_EQ(meta.step, 3);
  EXPECT_TRUE(same_bits(weights_of(saved.model), weights_of(b)));
  EXPECT_TRUE(same_bits(own, buffers_of(b))) << "a version 2 file has no running statistics to restore";
}

TEST(CheckpointRunningStatistics, BufferOfAnotherNameIsRefused) {
  TempFile f;
  const Saved saved(f.path);
  std::string bytes = file_read_all(f.path);
  const std::string name = saved.model.running_statistics()[0]->buffers()[0].name;
  const size_t at = bytes.size() - sizeof(uint64_t) - buffer_section_bytes(saved.model);
  const size_t where = bytes.find(name, at);
  ASSERT_NE(where, std::string::npos);
  bytes[where + name.size() - 1] = 'X';  // "...running_mean" -> "...running_meaX"
  std::ofstream(f.path, std::ios::binary | std::ios::trunc)
      << resealed(bytes.substr(0, bytes.size() - sizeof(uint64_t)), CHECKPOINT_VERSION);
  MemoryAccount memory;
  Model b(saved.desc, &memory, 2);
  Optimizer opt(OptimizerConfig{}, b.parameters(), &memory);
  std::string msg;
  try {
    checkpoint_load(f.path, b, opt);
  } catch (const std::exception& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find(name.substr(0, name.size() - 1) + "X"), std::string::npos) << msg;
  EXPECT_NE(msg.find("does not match '" + name + "'"), std::string::npos) << msg;
}

}  // namespace
}  // namespace qsync
