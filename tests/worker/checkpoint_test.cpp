// Unit tests for worker/checkpoint: exact save/load round trips (weights, optimizer state,
// meta), refusal of another model's, a truncated or a corrupt checkpoint with a message naming
// the cause, and resume equivalence of worker/trainer's train_run (bitwise equal losses).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "kernels/device_class.h"
#include "planner/atomic_file.h"
#include "worker/checkpoint.h"
#include "worker/data/fashion_mnist.h"
#include "worker/trainer.h"

namespace qsync {
namespace {

namespace fs = std::filesystem;

// train_run activates the strongest CPU class with one thread; every test activates that same
// class first (activating it again is allowed, and oneDNN's ISA cap must precede its first GEMM).
const DeviceClass& test_class() {
  const DeviceClass& c = device_class_fallback(device_class_by_name("cpu-amx"));
  device_class_activate(c, 1);
  return c;
}

// A fresh directory under the system temp dir, removed at scope exit.
struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("qsync_checkpoint_test_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

ModelDesc tiny_model(const std::string& name, int64_t hidden, const std::string& activation = "relu") {
  return model_desc_parse("name: " + name +
                              "\n"
                              "task: classification\n"
                              "input: {kind: image, shape: [1, 4, 4]}\n"
                              "classes: 3\n"
                              "layers:\n"
                              "  - {name: flatten, type: flatten}\n"
                              "  - {name: fc1, type: linear, out: " +
                              std::to_string(hidden) +
                              "}\n"
                              "  - {name: act1, type: " +
                              activation +
                              "}\n"
                              "  - {name: fc2, type: linear, out: 3}\n",
                          name + ".yaml");
}

std::vector<std::vector<float>> values_of(const std::vector<Tensor*>& tensors) {
  std::vector<std::vector<float>> out;
  for (const Tensor* t : tensors) out.emplace_back(t->f32(), t->f32() + t->numel());
  return out;
}
std::vector<Tensor*> weights_of(const Model& m) {
  std::vector<Tensor*> out;
  for (Parameter* p : m.parameters()) out.push_back(&p->value);
  return out;
}
void fill_random(const std::vector<Tensor*>& tensors, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  for (Tensor* t : tensors)
    for (int64_t i = 0; i < t->numel(); ++i) t->f32()[i] = n(rng);
}
// Bitwise equality (EXPECT_EQ on floats would also pass -0 == 0).
bool same_bits(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].size() != b[i].size() || std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)) != 0) return false;
  return true;
}

// The message of the std::exception `fn` throws ("" when it throws none).
template <class Fn> std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), std::streamsize(bytes.size()));
}

// A saved checkpoint of tiny_model("tiny", 8) with random weights and AdamW state.
struct Saved {
  ModelDesc desc = tiny_model("tiny", 8);
  MemoryAccount memory;
  Model model{desc, &memory, 1};
  Optimizer opt{OptimizerConfig{}, model.parameters(), &memory};
  explicit Saved(const std::string& path) {
    fill_random(opt.state(), 3);
    checkpoint_save(path, model, opt, {4, 0, 4, 1, desc.hash, {}});
  }
};

TEST(Checkpoint, RoundTripRestoresWeightsOptimizerStateAndMetaExactly) {
  test_class();
  TempDir dir;
  for (OptimizerKind kind : {OptimizerKind::ADAMW, OptimizerKind::SGD}) {
    SCOPED_TRACE(optimizer_kind_name(kind));
    const ModelDesc desc = tiny_model("tiny", 8);
    OptimizerConfig oc;
    oc.kind = kind;
    MemoryAccount memory;
    Model a(desc, &memory, 1);
    Optimizer opt_a(oc, a.parameters(), &memory);
    fill_random(opt_a.state(), 2);
    opt_a.set_updates_applied(17);
    const CheckpointMeta meta{12, 2, 5, 99, desc.hash, {}};
    const std::string path = checkpoint_path(dir.path.string());
    checkpoint_save(path, a, opt_a, meta);

    Model b(desc, &memory, 2);  // another seed: other weights
    Optimizer opt_b(oc, b.parameters(), &memory);
    ASSERT_FALSE(same_bits(values_of(weights_of(a)), values_of(weights_of(b))));
    const CheckpointMeta got = checkpoint_load(path, b, opt_b);
    EXPECT_TRUE(same_bits(values_of(weights_of(a)), values_of(weights_of(b))));
    EXPECT_TRUE(same_bits(values_of(opt_a.state()), values_of(opt_b.state())));
    EXPECT_EQ(opt_b.updates_applied(), 17);
    EXPECT_EQ(b.weight_hash(), a.weight_hash());
    EXPECT_EQ(got.step, 12);
    EXPECT_EQ(got.data_epoch, 2);
    EXPECT_EQ(got.data_index, 5);
    EXPECT_EQ(got.seed, 99u);
    EXPECT_EQ(got.model_hash, desc.hash);
  }
}

TEST(Checkpoint, AnotherModelIsRefusedNamingBothHashes) {
  test_class();
  TempDir dir;
  const std::string path = dir.file("a.qckpt");
  const Saved saved(path);
  // GELU for ReLU: the same parameter names and sizes, only the hash tells the models apart.
  for (const ModelDesc& other : {tiny_model("tiny-gelu", 8, "gelu"), tiny_model("tiny-wider", 9)}) {
    SCOPED_TRACE(other.name);
    ASSERT_NE(other.hash, saved.desc.hash);
    MemoryAccount memory;
    Model m(other, &memory, 1);
    Optimizer opt(OptimizerConfig{}, m.parameters(), &memory);
    const std::vector<std::vector<float>> before = values_of(weights_of(m));
    const std::string msg = error_of([&] { checkpoint_load(path, m, opt); });
    EXPECT_NE(msg.find("another model"), std::string::npos) << msg;
    EXPECT_NE(msg.find(model_hash_string(saved.desc.hash)), std::string::npos) << msg;
    EXPECT_NE(msg.find(model_hash_string(other.hash)), std::string::npos) << msg;
    EXPECT_NE(msg.find(other.name), std::string::npos) << msg;
    EXPECT_TRUE(same_bits(before, values_of(weights_of(m)))) << "a refused load changed the weights";
  }
}

TEST(Checkpoint, AnotherOptimizerIsRefused) {
  test_class();
  TempDir dir;
  const std::string path = dir.file("a.qckpt");
  const Saved saved(path);
  MemoryAccount memory;
  Model m(saved.desc, &memory, 1);
  OptimizerConfig sgd;
  sgd.kind = OptimizerKind::SGD;
  Optimizer opt(sgd, m.parameters(), &memory);
  const std::string msg = error_of([&] { checkpoint_load(path, m, opt); });
  EXPECT_NE(msg.find("adamw"), std::string::npos) << msg;
  EXPECT_NE(msg.find("sgd"), std::string::npos) << msg;
}

// Every cut of the file (inside the magic, the header, a name, a tensor, the checksum) is
// reported as truncated, with the sizes, and changes nothing.
TEST(Checkpoint, TruncatedFileIsRefused) {
  test_class();
  TempDir dir;
  const std::string path = dir.file("a.qckpt");
  const Saved saved(path);
  const std::string bytes = file_read_all(path);
  const std::string cut_path = dir.file("cut.qckpt");
  for (size_t keep : {size_t(0), size_t(5), size_t(30), size_t(75), bytes.size() / 2, bytes.size() - 9,
                      bytes.size() - 1}) {
    SCOPED_TRACE("kept " + std::to_string(keep) + " of " + std::to_string(bytes.size()) + " bytes");
    write_file(cut_path, bytes.substr(0, keep));
    MemoryAccount memory;
    Model m(saved.desc, &memory, 2);
    Optimizer opt(OptimizerConfig{}, m.parameters(), &memory);
    const std::vector<std::vector<float>> before = values_of(weights_of(m));
    const std::string msg = error_of([&] { checkpoint_load(cut_path, m, opt); });
    EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
    EXPECT_NE(msg.find(cut_path), std::string::npos) << msg;
    EXPECT_NE(msg.find("has " + std::to_string(keep) + ")"), std::string::npos) << msg;
    EXPECT_TRUE(same_bits(before, values_of(weights_of(m))));
  }
}

TEST(Checkpoint, CorruptFileIsRefused) {
  test_class();
  TempDir dir;
  const std::string path = dir.file("a.qckpt");
  const Saved saved(path);
  const std::string bytes = file_read_all(path);
  const std::string bad = dir.file("bad.qckpt");
  auto load_error = [&](const std::string& content) {
    write_file(bad, content);
    MemoryAccount memory;
    Model m(saved.desc, &memory, 2);
    Optimizer opt(OptimizerConfig{}, m.parameters(), &memory);
    return error_of([&] { checkpoint_load(bad, m, opt); });
  };
  // One flipped bit in a weight, in the step count and in the checksum itself.
  for (size_t at : {bytes.size() / 2, size_t(25), bytes.size() - 3}) {
    std::string c = bytes;
    c[at] = char(c[at] ^ 0x10);
    const std::string msg = load_error(c);
    EXPECT_NE(msg.find("corrupt (checksum mismatch)"), std::string::npos) << at << ": " << msg;
  }
  std::string c = bytes;
  c[0] = 'X';
  EXPECT_NE(load_error(c).find("not a QSync checkpoint"), std::string::npos);
  EXPECT_NE(load_error("plain text, not a checkpoint at all").find("not a QSync checkpoint"), std::string::npos);
  c = bytes;
  c[8] = 9;  // version 9
  EXPECT_NE(load_error(c).find("has version 9"), std::string::npos);
  // Trailing garbage after a complete checkpoint.
  EXPECT_NE(load_error(bytes + "extra").find("corrupt"), std::string::npos);
  EXPECT_NE(load_error("").find("truncated"), std::string::npos);
}

bool fashion_mnist_installed() {
  return fs::exists(fs::path(FASHION_MNIST_DEFAULT_DIR) / "train-images-idx3-ubyte.gz") &&
         fs::exists(fs::path(FASHION_MNIST_DEFAULT_DIR) / "t10k-images-idx3-ubyte.gz");
}

// An interrupted 20-step run: 10 steps, then a resume to 20. Both halves use the 20-step
// learning-rate schedule (optimizer.total_steps = 20, as the interrupted run had), so the
// resumed steps 11-20 are the same arithmetic as the uninterrupted run's: equal bit for bit.
TEST(CheckpointResume, ResumedRunMatchesUninterruptedRunBitwise) {
  if (!fashion_mnist_installed()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  TempDir dir;
  TrainConfig c;
  c.model = "mlp";
  c.steps = 20;
  c.batch = 32;
  c.eval_limit = 100;
  c.quiet = true;
  c.checkpoint_every = 10;
  c.optimizer.total_steps = 20;
  c.device_class = test_class().name;
  c.checkpoint_dir = dir.file("full");
  const TrainSummary full = train_run(c);
  ASSERT_EQ(full.losses.size(), 20u);

  c.checkpoint_dir = dir.file("split");
  c.steps = 10;
  const TrainSummary first = train_run(c);
  ASSERT_EQ(first.losses.size(), 10u);
  c.steps = 20;
  c.resume = true;
  const TrainSummary second = train_run(c);
  EXPECT_EQ(second.start_step, 10);
  EXPECT_EQ(second.steps, 20);
  ASSERT_EQ(second.losses.size(), 10u);
  for (size_t i = 0; i < 10; ++i) {
    EXPECT_EQ(std::memcmp(&first.losses[i], &full.losses[i], sizeof(double)), 0)
        << "step " << i + 1 << ": " << first.losses[i] << " vs " << full.losses[i];
    EXPECT_EQ(std::memcmp(&second.losses[i], &full.losses[10 + i], sizeof(double)), 0)
        << "step " << i + 11 << ": " << second.losses[i] << " vs " << full.losses[10 + i];
  }
  EXPECT_EQ(second.final_test_accuracy, full.final_test_accuracy);
  EXPECT_EQ(second.final_test_loss, full.final_test_loss);
  // The checkpoints at step 20 hold the same bytes.
  EXPECT_EQ(file_read_all(checkpoint_path(dir.file("split"))), file_read_all(checkpoint_path(dir.file("full"))));
}

TEST(CheckpointResume, ResumeWithoutCheckpointStartsFromScratch) {
  if (!fashion_mnist_installed()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  TempDir dir;
  TrainConfig c;
  c.model = "mlp";
  c.steps = 2;
  c.batch = 16;
  c.eval_limit = 20;
  c.quiet = true;
  c.resume = true;
  c.device_class = test_class().name;
  c.checkpoint_dir = dir.file("none");
  const TrainSummary s = train_run(c);
  EXPECT_EQ(s.start_step, 0);
  EXPECT_EQ(s.steps, 2);
  EXPECT_TRUE(fs::exists(checkpoint_path(c.checkpoint_dir)));
}

}  // namespace
}  // namespace qsync
