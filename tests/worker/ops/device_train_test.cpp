// File: tests/worker/ops/device_train_test.cpp
// Training on a GPU end to end (train_run as `qsync-worker train` runs it), against the CPU run
// of the same seed: fp32 losses agree to FP32 rounding (the same model, data order and
// arithmetic, summed in other orders), a mixed plan trains, a resumed GPU run repeats the
// uninterrupted one, and the class of the machine's GPU refuses what it cannot run. Each run is
// a child process (a process runs as one device class). Needs a GPU (skips without one), except
// the refusal of a GPU class the machine lacks, which runs everywhere.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/cuda/cuda_device.h"
#include "kernels/device_class.h"
#include "worker/trainer.h"

namespace qsync {
namespace {

// The Debian package's Fashion-MNIST, or $QSYNC_FASHION_MNIST (scripts/gpu-check.sh carries a
// subset to a GPU machine that lacks the package).
const std::string FASHION_MNIST = [] {
  const char* env = std::getenv("QSYNC_FASHION_MNIST");
  return std::string(env != nullptr && *env != 0 ? env : "/usr/share/datasets/fashion-mnist");
}();

// Runs fn in a forked child; returns "" when it returned, else its error. The test process itself
// never initializes CUDA: a CUDA context does not survive fork(), so every child starts clean.
std::string in_child(const std::function<void()>& fn) {
  int fds[2];
  if (pipe(fds) != 0) return "pipe failed";
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    std::string error;
    try {
      fn();
    } catch (const std::exception& e) {
      error = e.what();
      if (error.empty()) error = "an exception without a message";
    }
    if (!error.empty() && write(fds[1], error.data(), error.size()) < 0) _exit(2);
    _exit(error.empty() ? 0 : 1);
  }
  close(fds[1]);
  std::string error;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) error.append(buf, size_t(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status)) return "the child died (signal " + std::to_string(WTERMSIG(status)) + ")";
  if (WEXITSTATUS(status) != 0 && error.empty()) return "the child exited " + std::to_string(WEXITSTATUS(status));
  return error;
}

struct VisibleGpu {
  int count = 0;
  std::string product;  // device 0's name
  std::string cls;      // the class that names it, or ""
};

// Device 0 as a child sees it (asked once).
const VisibleGpu& visible_gpu() {
  static const VisibleGpu gpu = [] {
    VisibleGpu g;
    const std::string answer = in_child([] {
      const int n = cuda_device_count();
      throw std::runtime_error(std::to_string(n) + "\n" + (n > 0 ? cuda_device_name(0) : std::string()));
    });
    const size_t nl = answer.find('\n');
    if (nl == std::string::npos) return g;
    g.count = std::atoi(answer.substr(0, nl).c_str());
    g.product = answer.substr(nl + 1);
    const DeviceClass* c = g.count > 0 ? device_class_for_gpu_product(g.product) : nullptr;
    if (c != nullptr) g.cls = c->name;
    return g;
  }();
  return gpu;
}

std::string gpu_class() { return visible_gpu().cls; }

#define REQUIRE_GPU_CLASS()                                                                     \
  if (visible_gpu().count == 0) {                                                               \
    GTEST_SKIP() << "no CUDA device";                                                           \
  }                                                                                             \
  if (gpu_class().empty()) {                                                                    \
    GTEST_SKIP() << "no device class names " << visible_gpu().product;                          \
  }                                                                                             \
  if (!std::filesystem::exists(FASHION_MNIST)) {                                                \
    GTEST_SKIP() << "no Fashion-MNIST at " << FASHION_MNIST;                                    \
  }

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("qsync_device_train_" + std::to_string(getpid()) + "_" + name))
      .string();
}

// Runs train_run(c) in a child; returns its summary JSON (empty on failure, with the error printed).
nlohmann::json train_in_child(TrainConfig c, const std::string& tag) {
  c.summary_json = temp_path(tag + ".json");
  c.quiet = true;
  const std::string error = in_child([&] { train_run(c); });
  if (!error.empty()) {
    std::fprintf(stderr, "%s: %s\n", tag.c_str(), error.c_str());
    return {};
  }
  std::ifstream in(c.summary_json);
  return nlohmann::json::parse(in);
}

TrainConfig mlp_config(const std::string& device_class, const std::string& precision) {
  TrainConfig c;
  c.model = "mlp";
  c.data = FASHION_MNIST;
  c.steps = 20;
  c.batch = 64;
  c.eval_limit = 256;
  c.precision = precision;
  c.device_class = device_class;
  return c;
}

// FP32 on both devices: the relative difference of the losses stays at FP32 rounding, grown by
// 20 AdamW steps: 1e-4.
TEST(DeviceTrain, Fp32LossesFollowTheCpuRun) {
  REQUIRE_GPU_CLASS();
  for (const char* model : {"mlp", "cnn"}) {
    TrainConfig c = mlp_config("", "fp32");
    c.model = model;
    const nlohmann::json cpu = train_in_child(c, std::string(model) + "_cpu");
    c.device_class = gpu_class();
    const nlohmann::json gpu = train_in_child(c, std::string(model) + "_gpu");
    ASSERT_FALSE(cpu.empty());
    ASSERT_FALSE(gpu.empty());
    const auto a = cpu["losses"].get<std::vector<double>>(), b = gpu["losses"].get<std::vector<double>>();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(b[i], a[i], 1e-4 * a[i]) << model << " step " << i;
    EXPECT_NE(gpu["device"].get<std::string>().find("sm"), std::string::npos) << gpu["device"];
    EXPECT_GT(gpu["device_peak_bytes"].get<int64_t>(), 0);
  }
}

TEST(DeviceTrain, EveryPrecisionTrainsAndLearns) {
  REQUIRE_GPU_CLASS();
  const DeviceClass& cls = device_class_by_name(gpu_class());
  for (const char* p : {"tf32", "bf16", "fp16", "int8", "int8-all", "fp8"}) {
    if (!layer_precision_support(cls, layer_precision_from_name(p)).ok) continue;
    const nlohmann::json s = train_in_child(mlp_config(gpu_class(), p), std::string("mlp_") + p);
    ASSERT_FALSE(s.empty()) << p;
    const auto losses = s["losses"].get<std::vector<double>>();
    EXPECT_LT(losses.back(), losses.front()) << p << " did not learn";
    EXPECT_GT(s["final_test_accuracy"].get<double>(), 0.5) << p;
  }
}

TEST(DeviceTrain, ResumeRepeatsTheUninterruptedRun) {
  REQUIRE_GPU_CLASS();
  const std::string dir = temp_path("ckpt");
  std::filesystem::remove_all(dir);
  TrainConfig whole = mlp_config(gpu_class(), "int8");
  const nlohmann::json full = train_in_child(whole, "whole");
  TrainConfig first = whole;
  first.steps = 10;
  first.optimizer.total_steps = 20;
  first.checkpoint_dir = dir;
  ASSERT_FALSE(train_in_child(first, "first").empty());
  TrainConfig rest = whole;
  rest.checkpoint_dir = dir;
  rest.resume = true;
  const nlohmann::json resumed = train_in_child(rest, "rest");
  ASSERT_FALSE(full.empty());
  ASSERT_FALSE(resumed.empty());
  const auto a = full["losses"].get<std::vector<double>>(), b = resumed["losses"].get<std::vector<double>>();
  ASSERT_EQ(b.size(), 10u);
  for (size_t i = 0; i < b.size(); ++i) EXPECT_EQ(b[i], a[i + 10]) << "step " << i + 10;
  EXPECT_EQ(full["weight_hash"], resumed["weight_hash"]);
  std::filesystem::remove_all(dir);
}

// Runs everywhere: a GPU class this machine lacks (here: every GPU class when none is visible, or
// the class of another product) fails at start with an error naming the class and the fix.
TEST(DeviceTrain, AGpuClassTheMachineLacksFailsAtStart) {
  std::string missing = "gpu-h200";
  if (visible_gpu().count > 0) missing = gpu_class() == "gpu-t4" ? "gpu-h200" : "gpu-t4";
  TrainConfig c = mlp_config(missing, "fp32");
  c.data = temp_path("no_data_needed");  // the refusal comes before the data is read
  c.quiet = true;
  const std::string what = in_child([&] { train_run(c); });
  ASSERT_FALSE(what.empty()) << "training as " << missing << " on this machine must throw";
  EXPECT_NE(what.find("cannot run as " + missing), std::string::npos) << what;
  EXPECT_TRUE(what.find("no CUDA") != std::string::npos || what.find("needs an NVIDIA") != std::string::npos) << what;
}

TEST(DeviceTrain, AnotherGpuClassOrAnUnrunnablePrecisionIsRefused) {
  REQUIRE_GPU_CLASS();
  const std::string other = gpu_class() == "gpu-t4" ? "gpu-h200" : "gpu-t4";
  EXPECT_TRUE(train_in_child(mlp_config(other, "fp32"), "other_class").empty()) << "ran as " << other;
  if (device_class_by_name(gpu_class()).cuda_sm < 89) {
    EXPECT_TRUE(train_in_child(mlp_config(gpu_class(), "fp8"), "fp8").empty()) << "fp8 below sm89";
  }
}

}  // namespace
}  // namespace qsync
