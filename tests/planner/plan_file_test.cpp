// File: tests/planner/plan_file_test.cpp
// Tests of planner/plan_file.h and planner/atomic_file.h: plan round trips (text and file),
// precision_of, the errors for an unknown layer, an unknown precision, another model and a hash
// mismatch, and atomic writes (no temp files left; an existing file intact when a write fails).
#include "planner/plan_file.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>

#include "planner/atomic_file.h"
#include "tests/planner/planner_test_support.h"

namespace qsync {
namespace {

using qsync::testing::expect_error;
using qsync::testing::ScratchDir;

const ModelDesc& cnn() {
  static const ModelDesc m = model_desc_find("cnn");
  return m;
}

void expect_same_plan(const RankPlan& a, const RankPlan& b) {
  EXPECT_EQ(a.model, b.model);
  EXPECT_EQ(a.model_hash, b.model_hash);
  EXPECT_EQ(a.rank, b.rank);
  EXPECT_EQ(a.device_class, b.device_class);
  EXPECT_EQ(a.local_batch, b.local_batch);
  EXPECT_EQ(a.predicted_step_seconds, b.predicted_step_seconds);
  EXPECT_EQ(a.default_precision, b.default_precision);
  EXPECT_EQ(a.layers, b.layers);
}

RankPlan sample_plan() {
  RankPlan p;
  p.model = cnn().name;
  p.model_hash = cnn().hash;
  p.rank = 1;
  p.device_class = "cpu-avx2";
  p.local_batch = 64;
  p.predicted_step_seconds = 0.081;
  p.default_precision = LayerPrecision::BF16;
  p.layers = {{"conv1", LayerPrecision::INT8}, {"conv4", LayerPrecision::INT8_ALL}, {"fc1", LayerPrecision::FP8},
              {"fc2", LayerPrecision::FP32}};
  return p;
}

TEST(PlanFile, RoundTripsThroughText) {
  RankPlan p = sample_plan();
  std::string text = plan_to_yaml(p);
  expect_same_plan(plan_parse(text, "plan.yaml", cnn()), p);
  EXPECT_NE(text.find("model_hash: \"" + model_hash_string(cnn().hash) + "\""), std::string::npos) << text;
  EXPECT_NE(text.find("  conv4: int8-all\n"), std::string::npos) << text;

  RankPlan minimal;  // optional fields unset stay unset
  minimal.model = cnn().name;
  RankPlan back = plan_parse(plan_to_yaml(minimal), "plan.yaml", cnn());
  expect_same_plan(back, minimal);
  EXPECT_FALSE(back.rank.has_value());
  EXPECT_FALSE(back.model_hash.has_value());

  RankPlan odd = sample_plan();  // strings that YAML could misread are quoted
  odd.device_class = "yes: \"gpu\" #1";
  expect_same_plan(plan_parse(plan_to_yaml(odd), "plan.yaml", cnn()), odd);
}

TEST(PlanFile, RoundTripsThroughAFile) {
  ScratchDir dir;
  std::string path = dir.file("rank1.yaml");
  plan_file_write(path, sample_plan());
  expect_same_plan(plan_file_load(path, cnn()), sample_plan());
  plan_file_write(path, plan_uniform(cnn(), LayerPrecision::FP16));  // overwrite
  RankPlan uniform = plan_file_load(path, cnn());
  EXPECT_EQ(uniform.layers.size(), 6u);
  EXPECT_EQ(uniform.precision_of("conv3"), LayerPrecision::FP16);
  EXPECT_EQ(uniform.model_hash, cnn().hash);
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"rank1.yaml"}));
}

TEST(PlanFile, PrecisionOfFallsBackToTheDefault) {
  RankPlan p = plan_parse("model: cnn-fmnist\ndefault: fp16\nlayers: {conv1: int8}\n", "plan.yaml", cnn());
  EXPECT_EQ(p.precision_of("conv1"), LayerPrecision::INT8);
  EXPECT_EQ(p.precision_of("fc2"), LayerPrecision::FP16);
  RankPlan q = plan_parse("model: cnn-fmnist\n", "plan.yaml", cnn());
  EXPECT_EQ(q.precision_of("fc2"), LayerPrecision::FP32);
  EXPECT_TRUE(q.layers.empty());
}

TEST(PlanFile, HashIsCheckedWhenPresent) {
  std::string good = "model: cnn-fmnist\nmodel_hash: \"" + model_hash_string(cnn().hash) + "\"\n";
  EXPECT_EQ(plan_parse(good, "plan.yaml", cnn()).model_hash, cnn().hash);
  expect_error<std::invalid_argument>(
      [] { plan_parse("model: cnn-fmnist\nmodel_hash: \"0123456789abcdef\"\n", "plan.yaml", cnn()); },
      {"plan.yaml: model_hash 0123456789abcdef does not match model 'cnn-fmnist'",
       "hash " + model_hash_string(cnn().hash), "re-run the planner"});
  expect_error<std::invalid_argument>(
      [] { plan_parse("model: cnn-fmnist\nmodel_hash: xyz\n", "plan.yaml", cnn()); },
      {"plan.yaml: model_hash 'xyz' is not a hex string"});
}

TEST(PlanFile, ErrorsNameTheFileTheEntryAndTheFix) {
  const ModelDesc& m = cnn();
  auto parse = [&](const std::string& text) { plan_parse(text, "plan.yaml", m); };
  expect_error<std::invalid_argument>([&] { parse("model: cnn-fmnist\nlayers: {fc9: int8}\n"); },
                                      {"plan.yaml: layer 'fc9' is not a layer of model 'cnn-fmnist'",
                                       "did you mean 'fc1'?", "GEMM layers", "conv1, conv2, conv3", "(6 in all)"});
  expect_error<std::invalid_argument>([&] { parse("model: cnn-fmnist\nlayers: {relu1: int8}\n"); },
                                      {"layer 'relu1' of model 'cnn-fmnist' is relu, not a GEMM layer", "only GEMM layers",
                                       "remove the entry"});
  expect_error<std::invalid_argument>([&] { parse("model: cnn-fmnist\nlayers: {fc1: int4}\n"); },
                                      {"plan.yaml: layer 'fc1': unknown layer precision 'int4'",
                                       "known: fp32, tf32, bf16, fp16, int8, int8-all, fp8"});
  expect_error<std::invalid_argument>([&] { parse("model: cnn-fmnist\ndefault: fp64\n"); },
                                      {"plan.yaml: default: unknown layer precision 'fp64'"});
  expect_error<std::invalid_argument>([&] { parse("model: mlp-fmnist\nlayers: {fc1: int8}\n"); },
                                      {"plan.yaml: the plan is for model 'mlp-fmnist' but the model is 'cnn-fmnist'",
                                       "re-run the planner"});
  expect_error<std::invalid_argument>([&] { parse("default: fp32\n"); }, {"plan.yaml: missing 'model'"});
  expect_error<std::invalid_argument>([&] { parse("model: cnn-fmnist\nlocal_bach: 4\n"); },
                                      {"unknown key 'local_bach' (did you mean 'local_batch'?)"});
  expect_error<std::invalid_argument>([&] { parse("model: cnn-fmnist\nlocal_batch: 0\n"); },
                                      {"'local_batch' must be an integer >= 1, got '0'"});
  expect_error<std::invalid_argument>([&] { parse("model: cnn-fmnist\nlayers: [conv1]\n"); },
                                      {"'layers' must be a mapping of layer name to precision"});
  expect_error<std::invalid_argument>([&] { parse("model: cnn-fmnist\nlayers: {fc1: int8, fc1: fp16}\n"); },
                                      {"layer 'fc1' is listed twice"});
  expect_error<std::invalid_argument>([&] { parse("model: [cnn\n"); }, {"plan.yaml: malformed YAML at line"});
  ModelDesc vit = model_desc_find("vit");
  expect_error<std::invalid_argument>(
      [&] { plan_parse("model: vit-fmnist\nlayers: {blocks.0.attn: int8}\n", "plan.yaml", vit); },
      {"layer 'blocks.0.attn' of model 'vit-fmnist' is attention", "'blocks.0.attn.qkv' and 'blocks.0.attn.proj'"});
  expect_error<std::invalid_argument>(
      [&] { plan_parse("model: vit-fmnist\nlayers: {blocks.0: int8}\n", "plan.yaml", vit); },
      {"layer 'blocks.0' of model 'vit-fmnist' is sequential, not a GEMM layer"});
  EXPECT_EQ(plan_parse("model: vit-fmnist\nlayers: {blocks.3.mlp.fc2: fp8}\n", "plan.yaml", vit)
                .precision_of("blocks.3.mlp.fc2"),
            LayerPrecision::FP8);
  ScratchDir dir;
  expect_error<std::invalid_argument>([&] { plan_file_load(dir.file("none.yaml"), m); },
                                      {dir.file("none.yaml"), "No such file or directory"});
}

TEST(AtomicFile, WritesAndLeavesNoTempFiles) {
  ScratchDir dir;
  std::string path = dir.file("data.bin");
  std::string bytes(100000, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = char(i * 7);
  atomic_file_write(path, bytes);
  EXPECT_EQ(file_read_all(path), bytes);
  atomic_file_write(path, "short");
  EXPECT_EQ(file_read_all(path), "short");
  atomic_file_write(path, "");
  EXPECT_EQ(file_read_all(path), "");
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"data.bin"}));
}

TEST(AtomicFile, FailureNamesThePathAndLeavesNoTempFile) {
  ScratchDir dir;
  std::string missing = dir.file("no-such-dir/plan.yaml");
  expect_error<std::runtime_error>([&] { atomic_file_write(missing, "x"); },
                                   {"cannot write '" + missing + "'", "No such file or directory"});
  // Renaming onto a directory fails after the temp file was written: it must be removed.
  std::filesystem::create_directory(dir.file("taken"));
  expect_error<std::runtime_error>([&] { atomic_file_write(dir.file("taken"), "x"); },
                                   {"cannot write '" + dir.file("taken") + "'", "renaming temp file"});
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"taken"}));
  expect_error<std::runtime_error>([&] { file_read_all(dir.file("absent")); },
                                   {"cannot read '" + dir.file("absent") + "'", "No such file or directory"});
}

// A write that fails midway (the file-size limit, which binds root too) keeps the old contents.
TEST(AtomicFile, ExistingFileIntactWhenTheWriteFails) {
  ScratchDir dir;
  std::string path = dir.file("plan.yaml");
  atomic_file_write(path, "old contents\n");
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  auto previous = ::signal(SIGXFSZ, SIG_IGN);
  rlimit small = saved;
  small.rlim_cur = 64;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  bool threw = false;
  try {
    atomic_file_write(path, std::string(4096, 'n'));
  } catch (const std::runtime_error& e) {
    threw = true;
    EXPECT_NE(std::string(e.what()).find("cannot write '" + path + "'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("File too large"), std::string::npos) << e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &saved);
  ::signal(SIGXFSZ, previous);
  EXPECT_TRUE(threw);
  EXPECT_EQ(file_read_all(path), "old contents\n");
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"plan.yaml"}));
}

TEST(AtomicFile, UnwritableDirectoryKeepsTheExistingFile) {
  if (::geteuid() == 0) GTEST_SKIP() << "root ignores directory permissions; covered by the tests above";
  ScratchDir dir;
  std::string path = dir.file("plan.yaml");
  atomic_file_write(path, "old\n");
  std::filesystem::permissions(dir.path(), std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
  expect_error<std::runtime_error>([&] { atomic_file_write(path, "new\n"); },
                                   {"cannot write '" + path + "'", "Permission denied"});
  std::filesystem::permissions(dir.path(), std::filesystem::perms::owner_all);
  EXPECT_EQ(file_read_all(path), "old\n");
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"plan.yaml"}));
}

}  // namespace
}  // namespace qsync
