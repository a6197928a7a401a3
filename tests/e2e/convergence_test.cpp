// Convergence tests for the training engine: the CNN of the zoo reaches >= 85% Fashion-MNIST test
// accuracy within about half a minute of training on 1 core, at uniform FP32 and at uniform
// INT8 (QSync's int8: INT8 forward, 16-bit backward), on the strongest CPU device class here.
// Each run forks (a process runs as one device class) and reports through its summary JSON.
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

nlohmann::json train_in_child(TrainConfig c) {
  const std::string path = ::testing::TempDir() + "/convergence-" + c.precision + ".json";
  std::filesystem::remove(path);
  c.summary_json = path;
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
  std::ifstream in(path);
  return in ? nlohmann::json::parse(in) : nlohmann::json::object();
}

TrainConfig cnn_config(const std::string& precision) {
  TrainConfig c;
  c.model = "cnn";
  c.precision = precision;
  c.steps = 250;  // 16,000 samples, about a quarter epoch
  c.batch = 64;
  c.optimizer.lr = 2e-3;
  c.eval_limit = 2000;  // the first 2,000 test images: +-0.8 points of binomial noise at 85%
  // One thread: ctest runs two tests at once on 2 cores, and two 2-thread OpenMP runs on 2 cores
  // spin against each other (measured: 140 s each instead of about 30 s).
  c.threads = 1;
  c.seed = 7;
  c.quiet = true;
  return c;
}

// Measured here: 87.0% (fp32) and 86.6-87.0% (int8, AVX-512 and AVX2 classes) at this budget;
// 85% leaves room for seed and ISA differences without letting a broken engine pass (an engine
// that does not learn stays near 10%, a badly biased one well below 80% after 250 steps).
TEST(Convergence, CnnReaches85PercentInFp32) {
  const auto s = train_in_child(cnn_config("fp32"));
  ASSERT_TRUE(s.contains("final_test_accuracy"));
  EXPECT_GE(s["final_test_accuracy"].get<double>(), 0.85);
}

TEST(Convergence, CnnReaches85PercentInInt8) {
  const auto s = train_in_child(cnn_config("int8"));
  ASSERT_TRUE(s.contains("final_test_accuracy"));
  EXPECT_GE(s["final_test_accuracy"].get<double>(), 0.85);
}

}  // namespace
}  // namespace qsync
