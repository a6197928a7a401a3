// Steady-state allocation of the training engine: after the warm-up steps a step reuses the
// activation and workspace buffers of the steps before it, so it takes (almost) no minor page
// faults (getrusage over 100 steps, as train_run reports it in its summary). Before buffers were
// reused, the CNN took about 300 faults a step at batch 128 and about 16 at batch 16.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "worker/trainer.h"

namespace qsync {
namespace {

// One run in a forked child (a worker process per run, as in production: no other run's heap or
// cached blocks in the way); its summary JSON.
nlohmann::json train_steps(const std::string& model, const std::string& precision, int64_t batch) {
  TrainConfig c;
  c.model = model;
  c.precision = precision;
  c.steps = STEADY_STATE_WARMUP_STEPS + 100;
  c.batch = batch;
  c.threads = 1;
  c.eval_limit = 10;
  c.quiet = true;
  c.summary_json = ::testing::TempDir() + "/steady-state-" + model + "-" + precision + ".json";
  std::filesystem::remove(c.summary_json);
  const pid_t pid = fork();
  if (pid == 0) {
    try {
      train_run(c);
      _exit(0);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "train_run: %s\n", e.what());
      _exit(1);
    }
  }
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  std::ifstream in(c.summary_json);
  return in ? nlohmann::json::parse(in) : nlohmann::json::object();
}

// Steady state: a per-step allocation of any activation faults in every step, at least once per
// 4 KiB page it touches (hundreds a step), so only a minority of the 100 steps may take any
// fault. The residue is the buffer cache's high-water mark still growing: traced with perf
// (page-fault samples with call stacks over 400 INT8 CNN steps), the late faults are oneDNN's
// JIT kernels' first writes into memory no step before touched (by all appearances a block
// newly allocated when a step's live set first needs one more buffer of some size), 62 faults in
// 4 steps, none after step ~140. Measured on an AVX-512 BF16 VM, the INT8 CNN run alone takes 0.44
// faults a step in 5 of the 100 steps, under the parallel test suite 1.25 in 7; the FP32 CNN and
// the INT8 MLP 0.0 in 0.
constexpr int64_t MAX_STEPS_WITH_FAULTS = 20;
// The average, loosely (8x the worst measured): hundreds a step fail it by far.
constexpr double MAX_FAULTS_PER_STEP = 10.0;

void expect_steady(const nlohmann::json& s) {
  EXPECT_GE(s.value("steady_steps_with_page_faults", int64_t(-1)), 0) << s.dump();
  EXPECT_LE(s.value("steady_steps_with_page_faults", int64_t(-1)), MAX_STEPS_WITH_FAULTS) << s.dump();
  EXPECT_GE(s.value("steady_minor_page_faults_per_step", -1.0), 0.0) << s.dump();
  EXPECT_LT(s.value("steady_minor_page_faults_per_step", -1.0), MAX_FAULTS_PER_STEP) << s.dump();
}

TEST(SteadyState, CnnStepsTakeNoPageFaults) {
  const nlohmann::json s = train_steps("cnn", "fp32", 16);
  expect_steady(s);
  EXPECT_GT(s.value("first_step_minor_page_faults", 0), 0) << "the first step does touch fresh memory";
}

// The im2col path (INT8 gradients) and the GEMM backend's operand copies (thread buffers).
TEST(SteadyState, Int8AllCnnStepsTakeNoPageFaults) { expect_steady(train_steps("cnn", "int8-all", 16)); }

TEST(SteadyState, Int8MlpStepsTakeNoPageFaults) { expect_steady(train_steps("mlp", "int8-all", 128)); }

}  // namespace
}  // namespace qsync
