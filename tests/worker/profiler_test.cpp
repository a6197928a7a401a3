// File: tests/worker/profiler_test.cpp
// Unit tests for worker/profiler: the per-step op samples, the command line, and real profiles
// of the MLP (batch 16) and the ViT (attention leaves) measured as cpu-avx2 in a forked child
// (a device class is per process), checked through the written JSON.
#include "worker/profiler.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "kernels/cpu_isa.h"

namespace qsync {
namespace {

namespace fs = std::filesystem;

TEST(OpStepSamples, KeepsOneSumPerStepAndDropsTheWarmUp) {
  OpStepSamples t;
  t.record("fc1.forward", 100.0);  // warm-up
  t.discard_step();
  for (double s : {3.0, 1.0, 2.0}) {
    t.record("fc1.forward", s);
    t.record("conv.im2col", s);  // two calls in a step: summed
    t.record("conv.im2col", s);
    t.end_step();
  }
  EXPECT_EQ(t.steps("fc1.forward"), 3u);
  EXPECT_EQ(t.center("fc1.forward"), 2.0);
  EXPECT_EQ(t.center("conv.im2col"), 4.0);
  EXPECT_FALSE(t.has("fc2.forward"));
  EXPECT_EQ(t.center("fc2.forward"), 0.0);
}

// Where ranks share the CPUs a preempted step is the rule: costs are means, whose parts add up to
// the whole step's; medians of the parts would each leave the preemption out.
TEST(OpStepSamples, MeansAddUpWhereMediansDoNot) {
  OpStepSamples median, mean(SampleCenter::MEAN);
  // Three steps, each preempted (+9) in a different one of three ops: every step takes 12.
  const double ops[3][3] = {{10, 1, 1}, {1, 10, 1}, {1, 1, 10}};
  for (const auto& step : ops)
    for (OpStepSamples* t : {&median, &mean}) {
      for (int op = 0; op < 3; ++op) t->record("op" + std::to_string(op), step[op]);
      t->end_step();
    }
  double median_sum = 0, mean_sum = 0;
  for (int op = 0; op < 3; ++op) {
    median_sum += median.center("op" + std::to_string(op));
    mean_sum += mean.center("op" + std::to_string(op));
  }
  EXPECT_DOUBLE_EQ(median_sum, 3.0);  // the preemption in no op
  EXPECT_DOUBLE_EQ(mean_sum, 12.0);   // the whole step
  EXPECT_DOUBLE_EQ(center_of({}, SampleCenter::MEAN), 0.0);
  EXPECT_DOUBLE_EQ(center_of({1, 2, 9}, SampleCenter::MEDIAN), 2.0);
  ProfileConfig shared;
  EXPECT_EQ(profile_sample_center(shared), SampleCenter::MEDIAN);
  shared.shared_cpus = true;
  EXPECT_EQ(profile_sample_center(shared), SampleCenter::MEAN);
}

TEST(ProfileArgs, ParsesAndNamesWhatIsMissing) {
  std::vector<std::string> args = {"--model", "mlp", "--device-class", "cpu-avx2", "--batch", "32",
                                   "--out", "p.json", "--steps", "3", "--threads", "2", "--quiet", "--shared-cpus"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  const ProfileConfig c = profile_parse_args(int(argv.size()), argv.data());
  EXPECT_EQ(c.model, "mlp");
  EXPECT_EQ(c.device_class, "cpu-avx2");
  EXPECT_EQ(c.batch, 32);
  EXPECT_EQ(c.steps, 3);
  EXPECT_EQ(c.threads, 2);
  EXPECT_EQ(c.out, "p.json");
  EXPECT_TRUE(c.quiet);
  EXPECT_TRUE(c.shared_cpus);
  EXPECT_FALSE(profile_parse_args(12, argv.data()).shared_cpus);  // without the trailing flags
  argv.resize(4);  // no --batch, no --out
  try {
    profile_parse_args(int(argv.size()), argv.data());
    ADD_FAILURE() << "no error for a missing --batch";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("--batch is required"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("usage: qsync-worker profile"), std::string::npos) << e.what();
  }
}

// Runs `fn` in a forked child; true when it returned without throwing.
template <class F>
bool in_child(F&& fn) {
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    try {
      fn();
      _exit(0);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: %s\n", e.what());
      _exit(1);
    }
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

TEST(StepJitter, NeighbouringDifferencesWithinRoundsOverTheMedian) {
  // Alternating 10 and 12 ms: every successive difference is 2 ms; the median step is 11 ms.
  const double sd = 0.002 / 0.6745 / std::sqrt(2.0);
  EXPECT_NEAR(step_jitter_of({0.010, 0.012, 0.010, 0.012}, 4), sd / 0.011, 1e-12);
  // A slow second round (drift) adds nothing: differences are taken within rounds only.
  EXPECT_NEAR(step_jitter_of({0.010, 0.012, 0.015, 0.017}, 2), 0.002 / 0.6745 / std::sqrt(2.0) / 0.0135, 1e-12);
  EXPECT_EQ(step_jitter_of({0.010, 0.010, 0.010}, 3), 0.0);  // steady steps
  EXPECT_EQ(step_jitter_of({0.010, 0.012}, 1), 0.0);          // one step a round: nothing to compare
}

class ProfilerRun : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (cpu_isa_detected() < CpuIsa::AVX2) return;
    dir_ = fs::temp_directory_path() / ("qsync_profiler_test_" + std::to_string(getpid()));
    fs::create_directories(dir_);
    ok_ = in_child([] {
      ProfileConfig c;
      c.device_class = "cpu-avx2";
      c.quiet = true;
      c.model = "mlp";
      c.batch = 16;
      c.steps = 2;
      c.rounds = 2;  // the precisions take turns: samples of both rounds are kept
      c.out = (dir_ / "mlp.profile.json").string();
      profile_run(c);
      c.model = "vit";
      c.batch = 4;
      c.steps = 1;
      c.rounds = 1;
      c.out = (dir_ / "vit.profile.json").string();
      profile_run(c);
    });
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  void SetUp() override {
    if (cpu_isa_detected() < CpuIsa::AVX2) GTEST_SKIP() << "cpu-avx2 needs an AVX2 CPU";
    ASSERT_TRUE(ok_) << "the profiling child failed (see its stderr)";
  }
  static inline fs::path dir_;
  static inline bool ok_ = false;
};

TEST_F(ProfilerRun, MlpHasEveryGemmLayerAtFp32AndInt8) {
  const ModelDesc m = model_desc_find("mlp");
  const DeviceProfile p = device_profile_load((dir_ / "mlp.profile.json").string());
  device_profile_check(p, m, 16, "profile");
  EXPECT_EQ(p.device_class, "cpu-avx2");
  EXPECT_FALSE(p.estimated);
  EXPECT_NE(p.source.find("measured on"), std::string::npos);
  EXPECT_NE(p.source.find("median of 2 rounds of 2 steps"), std::string::npos) << p.source;
  for (const LayerDesc* l : model_gemm_layers(m)) {
    const auto& costs = p.gemm_layers.at(l->name);
    for (LayerPrecision lp : {LayerPrecision::FP32, LayerPrecision::INT8}) {
      ASSERT_EQ(costs.count(lp), 1u) << l->name << " " << layer_precision_name(lp);
      EXPECT_GT(costs.at(lp).forward_seconds, 0) << l->name;
      EXPECT_GT(costs.at(lp).backward_seconds, 0) << l->name;
    }
    const LayerCost& f32 = costs.at(LayerPrecision::FP32);
    const LayerCost& i8 = costs.at(LayerPrecision::INT8);
    EXPECT_EQ(f32.saved_bytes, 16 * shape_numel(l->in_shape) * 4) << l->name;
    EXPECT_LT(i8.saved_bytes, f32.saved_bytes) << l->name;
    EXPECT_EQ(f32.weight_bytes, 0) << l->name;
    EXPECT_EQ(i8.weight_bytes, l->gemm_n * l->gemm_k) << l->name;
  }
  // Emulated precisions are real choices: bf16 (emulated on cpu-avx2) is there too.
  EXPECT_EQ(p.gemm_layers.at("fc1").count(LayerPrecision::BF16), 1u);
  for (const char* l : {"flatten", "relu1", "relu2"}) EXPECT_EQ(p.other_layers.count(l), 1u) << l;
  EXPECT_GT(p.other_layers.at("relu1").forward_seconds, 0);
  EXPECT_EQ(p.other_layers.at("relu1").saved_bytes, 16 * 1024);  // a 1-byte mask
  for (const auto* table : {&p.casts, &p.channel_casts})
    for (const auto& [key, f] : *table) {
      EXPECT_GE(f.a, 0) << precision_name(key.first) << " -> " << precision_name(key.second);
      EXPECT_GE(f.b, 0);
    }
  for (Precision to : {Precision::BF16, Precision::FP16, Precision::INT8, Precision::FP8_E4M3})
    EXPECT_GT(p.casts.at({Precision::FP32, to}).at(1 << 20), 0) << precision_name(to);
  EXPECT_EQ(p.casts.count({Precision::INT8, Precision::FP16}), 1u);  // cpu-avx2: FP16 numerics
  EXPECT_EQ(p.channel_casts.count({Precision::FP32, Precision::INT8}), 1u);
  EXPECT_GT(p.optimizer_seconds, 0);
  EXPECT_EQ(p.static_bytes, model_parameter_count(m) * 4 * 4);  // value, grad, AdamW m and v
}

TEST_F(ProfilerRun, VitSplitsAttentionFromItsProjections) {
  const ModelDesc m = model_desc_find("vit");
  const DeviceProfile p = device_profile_load((dir_ / "vit.profile.json").string());
  device_profile_check(p, m, 4, "profile");
  for (const LayerDesc* l : model_gemm_layers(m)) {
    const LayerCost& c = p.gemm_layers.at(l->name).at(LayerPrecision::FP32);
    EXPECT_GT(c.forward_seconds, 0) << l->name;
    EXPECT_GT(c.backward_seconds, 0) << l->name;
    EXPECT_EQ(c.saved_bytes, 4 * shape_numel(l->in_shape) * 4) << l->name;
  }
  const LayerCost& attn = p.other_layers.at("blocks.0.attn");
  EXPECT_GT(attn.forward_seconds, 0);
  EXPECT_EQ(attn.saved_bytes, 4 * (16 * 3 * 64 + 4 * 16 * 16) * 4);  // qkv and the probabilities only
  EXPECT_EQ(p.other_layers.count("blocks.0.attn.qkv"), 0u);
  EXPECT_EQ(p.other_layers.count("blocks.0.ln1"), 1u);
}

}  // namespace
}  // namespace qsync
