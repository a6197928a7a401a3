// Unit tests for the qsync-worker binary (worker/main.cpp): bad inputs exit non-zero with a
// stderr naming the problem, and a short happy-path run writes the summary JSON.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "worker/data/fashion_mnist.h"

#ifndef QSYNC_WORKER_BIN
#error "QSYNC_WORKER_BIN must name the qsync-worker binary"
#endif

namespace qsync {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() {
    static int count = 0;
    path = fs::temp_directory_path() / ("qsync_worker_cli_test_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name() + "_" +
                                        std::to_string(count++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string file(const std::string& name) const { return (path / name).string(); }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(file(name)) << text;
    return file(name);
  }
};

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct RunResult {
  bool exited = false;  // false: killed by a signal (a crash, or the time limit)
  int code = -1;
  std::string err;
};

// Runs `qsync-worker train <args>` with stdout and stderr to files in `dir`; killed after
// 120 s (SIGALRM survives exec). The data-parallel environment is cleared: one local rank.
RunResult run_worker(const std::vector<std::string>& args, const TempDir& dir) {
  const std::string out_path = dir.file("stdout.txt"), err_path = dir.file("stderr.txt");
  std::vector<std::string> argv_s = {QSYNC_WORKER_BIN, "train"};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    const int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out < 0 || err < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0) _exit(126);
    for (const char* v : {"MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE"}) unsetenv(v);
    alarm(120);
    execv(argv[0], argv.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  RunResult r;
  r.exited = WIFEXITED(status);
  r.code = r.exited ? WEXITSTATUS(status) : -WTERMSIG(status);
  r.err = read_file(err_path);
  return r;
}

// A refused run: a clean non-zero exit whose stderr is the worker's error line naming every
// piece of `needles`.
void expect_refused(const std::vector<std::string>& args, const std::vector<std::string>& needles) {
  TempDir dir;
  const RunResult r = run_worker(args, dir);
  ASSERT_TRUE(r.exited) << "killed by signal " << -r.code << "; stderr:\n" << r.err;
  EXPECT_NE(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("qsync-worker: error:"), std::string::npos) << r.err;
  for (const std::string& n : needles) EXPECT_NE(r.err.find(n), std::string::npos) << "missing '" << n << "' in:\n" << r.err;
}

bool fashion_mnist_installed() {
  return fs::exists(fs::path(FASHION_MNIST_DEFAULT_DIR) / "train-images-idx3-ubyte.gz") &&
         fs::exists(fs::path(FASHION_MNIST_DEFAULT_DIR) / "t10k-images-idx3-ubyte.gz");
}

TEST(WorkerCli, MalformedModelYaml) {
  TempDir dir;
  const std::string model = dir.write("broken.yaml", "name: broken\nlayers: [ {name: fc, type: linear\n");
  expect_refused({"--model", model, "--steps", "1"}, {model, "malformed YAML"});
}

TEST(WorkerCli, OnnxModelsTrainAndBrokenOnesAreRefused) {
  const std::string gpt = std::string(QSYNC_SOURCE_DIR) + "/tests/golden/onnx/gpt.onnx";
  if (fs::exists("/usr/share/games/fortunes")) {
    TempDir dir;
    const RunResult r = run_worker({"--model", gpt, "--data", "/usr/share/games/fortunes", "--steps", "2", "--batch", "4",
                                    "--precision", "int8", "--eval-limit", "8", "--threads", "1", "--quiet"},
                                   dir);
    EXPECT_TRUE(r.exited && r.code == 0) << r.err;
  }
  TempDir dir;
  std::string bytes = read_file(gpt);
  const std::string cut = dir.write("cut.onnx", bytes.substr(0, bytes.size() / 3));
  expect_refused({"--model", cut, "--steps", "1"}, {cut, "ONNX: byte", "truncated"});
  const std::string text = dir.write("text.onnx", "name: not onnx\n");
  expect_refused({"--model", text, "--steps", "1"}, {text, "ONNX"});
}

TEST(WorkerCli, UnknownModelName) {
  expect_refused({"--model", "no-such-model", "--steps", "1"}, {"unknown model 'no-such-model'", "mlp"});
}

TEST(WorkerCli, WrongDataPath) {
  expect_refused({"--model", "mlp", "--data", "/nonexistent", "--steps", "1"}, {"/nonexistent"});
}

TEST(WorkerCli, PlanForAnotherModel) {
  TempDir dir;
  const std::string plan = dir.write("plan.yaml", "model: cnn-fmnist\ndefault: fp32\nlayers:\n  conv1: int8\n");
  expect_refused({"--model", "mlp", "--plan", plan, "--steps", "1"}, {plan, "cnn-fmnist", "mlp-fmnist"});
}

TEST(WorkerCli, PlanWithUnknownLayer) {
  TempDir dir;
  const std::string plan = dir.write("plan.yaml", "model: mlp-fmnist\nlayers:\n  fc9: int8\n");
  expect_refused({"--model", "mlp", "--plan", plan, "--steps", "1"}, {plan, "fc9"});
}

TEST(WorkerCli, UnknownPrecision) {
  TempDir dir;
  const std::string plan = dir.write("plan.yaml", "model: mlp-fmnist\nlayers:\n  fc1: int7\n");
  expect_refused({"--model", "mlp", "--plan", plan, "--steps", "1"}, {plan, "int7", "int8-all"});
  expect_refused({"--model", "mlp", "--precision", "int7", "--steps", "1"}, {"int7", "int8-all"});
}

TEST(WorkerCli, PlanAndPrecisionTogether) {
  TempDir dir;
  const std::string plan = dir.write("plan.yaml", "model: mlp-fmnist\n");
  expect_refused({"--model", "mlp", "--plan", plan, "--precision", "int8", "--steps", "1"}, {"--plan", "--precision"});
}

TEST(WorkerCli, BadNumbersAndFlags) {
  expect_refused({"--model", "mlp", "--batch", "0", "--steps", "1"}, {"--batch", "0"});
  expect_refused({"--model", "mlp", "--frobnicate"}, {"unknown argument '--frobnicate'", "usage:"});
  expect_refused({"--model", "mlp", "--steps"}, {"--steps needs a value"});
  expect_refused({"--model", "mlp", "--steps", "ten"}, {"--steps", "'ten'"});
  // Not read as "no step count given" (which would train a whole epoch).
  expect_refused({"--model", "mlp", "--steps", "-3"}, {"--steps must be at least 1, got -3"});
  expect_refused({"--model", "mlp", "--steps", "0"}, {"--steps must be at least 1, got 0"});
  expect_refused({"--model", "mlp", "--epochs", "-1"}, {"--epochs must be positive, got -1"});
  expect_refused({"--model", "mlp", "--keep-checkpoints", "0"}, {"--keep-checkpoints must be at least 1, got 0"});
  expect_refused({"--steps", "1"}, {"--model is required"});
}

TEST(WorkerCli, UnknownCommandAndNoArguments) {
  TempDir dir;
  const std::string err_path = dir.file("stderr.txt");
  const std::string cmd = std::string(QSYNC_WORKER_BIN) + " frobnicate 2>" + err_path + " >/dev/null";
  EXPECT_NE(std::system(cmd.c_str()), 0);
  EXPECT_NE(read_file(err_path).find("unknown command 'frobnicate'"), std::string::npos) << read_file(err_path);
  EXPECT_NE(std::system((std::string(QSYNC_WORKER_BIN) + " 2>/dev/null").c_str()), 0);
}

// A tiny image model whose checkpoint another model must refuse.
constexpr const char* TINY_MODEL =
    "name: tiny-fmnist\ntask: classification\ninput: {kind: image, shape: [1, 28, 28]}\nclasses: 10\n"
    "layers:\n  - {name: flatten, type: flatten}\n  - {name: fc, type: linear, out: 10}\n";

TEST(WorkerCli, ResumeWithAnotherModelsCheckpoint) {
  if (!fashion_mnist_installed()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  TempDir dir;
  const std::string tiny = dir.write("tiny.yaml", TINY_MODEL);
  const std::string ckpt = dir.file("ckpt");
  const std::vector<std::string> common = {"--steps", "1", "--batch", "8", "--eval-limit", "10", "--quiet",
                                           "--checkpoint-dir", ckpt};
  std::vector<std::string> first = {"--model", tiny};
  first.insert(first.end(), common.begin(), common.end());
  const RunResult r = run_worker(first, dir);
  ASSERT_TRUE(r.exited && r.code == 0) << r.err;
  ASSERT_TRUE(fs::exists(fs::path(ckpt) / "latest.qckpt"));
  ASSERT_TRUE(fs::exists(fs::path(ckpt) / "step-1.qckpt"));
  std::vector<std::string> second = {"--model", "mlp", "--resume"};
  second.insert(second.end(), common.begin(), common.end());
  expect_refused(second, {"step-1.qckpt", "another model", "mlp-fmnist", "--checkpoint-dir", "tried 1"});
}

TEST(WorkerCli, HappyPathWritesSummaryJson) {
  if (!fashion_mnist_installed()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  TempDir dir;
  const std::string summary = dir.file("summary.json");
  const RunResult r = run_worker(
      {"--model", "mlp", "--steps", "3", "--batch", "16", "--eval-limit", "50", "--quiet", "--summary-json", summary}, dir);
  ASSERT_TRUE(r.exited) << "killed by signal " << -r.code << "; stderr:\n" << r.err;
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(read_file(summary));
  for (const char* key : {"final_test_accuracy", "final_train_loss", "steps", "samples_per_second",
                          "median_step_seconds", "peak_memory_bytes"})
    ASSERT_TRUE(j.contains(key)) << key << " missing in " << j.dump(2);
  EXPECT_EQ(j["steps"].get<int64_t>(), 3);
  const double acc = j["final_test_accuracy"].get<double>(), loss = j["final_train_loss"].get<double>();
  EXPECT_GE(acc, 0.0);
  EXPECT_LE(acc, 1.0);
  EXPECT_TRUE(std::isfinite(loss) && loss > 0.0) << loss;
  EXPECT_GT(j["samples_per_second"].get<double>(), 0.0);
  EXPECT_GT(j["median_step_seconds"].get<double>(), 0.0);
  EXPECT_GT(j["peak_memory_bytes"].get<int64_t>(), 0);
  EXPECT_FALSE(j.contains("op_times")) << "op times without --op-times";
}

// --op-times: the summary's per-op table covers the training steps after the run's first (which
// creates the GEMM primitives) and none of the evaluations between them: each layer's forward
// once a step. Until 2026-12-07 the evaluations' forwards were counted (1.8 calls a step here).
TEST(WorkerCli, OpTimesCoverTheTrainingStepsAfterTheFirst) {
  if (!fashion_mnist_installed()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  TempDir dir;
  const std::string summary = dir.file("summary.json");
  const RunResult r = run_worker({"--model", "mlp", "--steps", "6", "--batch", "16", "--eval-every", "2", "--eval-limit",
                                  "64", "--op-times", "--quiet", "--summary-json", summary},
                                 dir);
  ASSERT_TRUE(r.exited) << "killed by signal " << -r.code << "; stderr:\n" << r.err;
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(read_file(summary));
  ASSERT_TRUE(j.contains("op_times")) << j.dump(2);
  EXPECT_EQ(j["op_time_steps"].get<int64_t>(), 5);
  const nlohmann::json& ops = j["op_times"];
  for (const char* layer : {"fc1", "fc2", "fc3"}) {
    for (const std::string op : {".forward", ".gemm_forward", ".backward", ".gemm_weight_grad"}) {
      ASSERT_TRUE(ops.contains(layer + op)) << layer << op << " missing in " << ops.dump(2);
      EXPECT_EQ(ops[layer + op]["calls_per_step"].get<double>(), 1.0) << layer << op;
      EXPECT_GT(ops[layer + op]["ms_per_step"].get<double>(), 0.0) << layer << op;
    }
    // A layer's total includes its GEMM.
    EXPECT_GE(ops[std::string(layer) + ".forward"]["ms_per_step"].get<double>(),
              ops[std::string(layer) + ".gemm_forward"]["ms_per_step"].get<double>());
  }
}

}  // namespace
}  // namespace qsync
