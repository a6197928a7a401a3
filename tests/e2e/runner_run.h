// File: tests/e2e/runner_run.h
// What the `qsync run` end-to-end tests share (runner_test.cpp, runner_faults_test.cpp): the job
// file they run, starting the runner on it with a summary JSON, waiting for it, and reading the
// per-rank summaries. QSYNC_RUNNER_BIN names the qsync binary.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/device_class.h"
#include "tests/e2e/process.h"

#ifndef QSYNC_RUNNER_BIN
#error "QSYNC_RUNNER_BIN must name the qsync binary"
#endif

namespace qsync::runner_e2e {

using namespace std::chrono_literals;
using test::Process;
using test::TempDir;

// A job file: the zoo MLP on two local one-thread workers, global batch 32, 50 evaluation
// samples, a checkpoint every 5 steps; `model` is the spec.model line ("" leaves it out).
inline std::string job_yaml(int64_t steps, const std::string& class0 = "cpu-avx512", const std::string& class1 = "cpu-avx2",
                     const std::string& model = "  model: {zoo: mlp}\n", const std::string& allocator = "uniform") {
  return "apiVersion: qsync.dev/v1alpha1\n"
         "kind: HybridTrainingJob\n"
         "metadata: {name: e2e-runner}\n"
         "spec:\n" +
         model +
         "  optimizer: {name: adamw, lr: 0.001}\n"
         "  steps: " +
         std::to_string(steps) +
         "\n"
         "  globalBatch: 32\n"
         "  seed: 1\n"
         "  evalLimit: 50\n"
         "  checkpoint: {dir: checkpoints, intervalSteps: 5}\n"
         "  planning: {allocator: " +
         allocator +
         ", precision: fp32}\n"
         "  pool:\n"
         "    local:\n"
         "      - {deviceClass: " +
         class0 +
         ", threads: 1}\n"
         "      - {deviceClass: " +
         class1 + ", threads: 1}\n";
}

struct RunnerRun {
  int code = -1;  // -1: still running after the limit (then killed)
  std::string out, err;
  nlohmann::json summary;
};

inline Process start_runner(const TempDir& dir, const std::string& job, const std::vector<std::string>& extra,
                     const std::string& tag) {
  test::SpawnOptions o;
  o.args = {QSYNC_RUNNER_BIN, "run", job, "--work-dir", dir.file("work"), "--summary-json", dir.file(tag + ".json"),
            "--collective-timeout", "20", "--profile-rounds", "1"};  // one round: quicker profiles
  o.args.insert(o.args.end(), extra.begin(), extra.end());
  o.stdout_path = dir.file(tag + ".out");
  o.stderr_path = dir.file(tag + ".err");
  return Process(o);
}

inline RunnerRun finish_runner(Process& p, const TempDir& dir, const std::string& tag, std::chrono::milliseconds limit = 60s) {
  RunnerRun r;
  r.code = p.wait_for(limit).value_or(-1);
  r.out = p.out();
  r.err = p.err();
  const nlohmann::json s = nlohmann::json::parse(test::read_text(dir.file(tag + ".json")), nullptr, false);
  if (!s.is_discarded()) r.summary = s;
  return r;
}

inline RunnerRun run_runner(const TempDir& dir, const std::string& job, const std::vector<std::string>& extra = {},
               const std::string& tag = "run") {
  Process p = start_runner(dir, job, extra, tag);
  return finish_runner(p, dir, tag);
}

inline std::string class_here(const std::string& requested) {
  return device_class_fallback(device_class_by_name(requested)).name;
}

inline nlohmann::json rank_summary(const TempDir& dir, int rank) {
  const std::string path = dir.file("work/summaries/rank-" + std::to_string(rank) + ".json");
  const nlohmann::json s = nlohmann::json::parse(test::read_text(path), nullptr, false);
  return s.is_discarded() ? nlohmann::json::object() : s;
}

}  // namespace qsync::runner_e2e
