// File: tests/e2e/operator_e2e_fixture.h
// The fixture of the operator's end-to-end tests (operator_e2e_test.cpp,
// operator_crash_e2e_test.cpp): qsync-kube-test-server with its local kubelet, the CRDs applied,
// Nodes for a training and an inference pool labelled with this machine's classes, their device
// profiles measured once per qsync-worker build, the example job applied under another name with
// edits, and helpers to read phases, objects and logged steps. A failed test prints the server's
// recent requests, the operator's log and the worker pods' log tails. Skipped without kubectl.
// QSYNC_SOURCE_DIR, QSYNC_BIN_DIR, QSYNC_OPERATOR_BIN and QSYNC_KUBE_TEST_SERVER_BIN come from CMake.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "kernels/device_class.h"
#include "tests/e2e/kube_cluster.h"
#include "tests/e2e/process.h"

namespace qsync::test {

using nlohmann::json;
using namespace std::chrono_literals;

inline const std::string kSource = QSYNC_SOURCE_DIR;
inline const std::string kJobFile = kSource + "/examples/k8s/fmnist-cpu.yaml";
inline const std::string kNodesFile = kSource + "/examples/k8s/local-nodes.yaml";
inline constexpr int kLocalBatch = 32;  // globalBatch 64 over two ranks: the batch the planner asks profiles for

// The device classes the example nodes are labelled with, as this machine runs them.
inline std::string class_here(const std::string& name) { return device_class_fallback(device_class_by_name(name)).name; }

inline std::string replaced(std::string text, const std::string& from, const std::string& to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
  return text;
}

class OperatorE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string kubectl = find_kubectl();
    if (kubectl.empty()) GTEST_SKIP() << "kubectl is not installed (scripts/install-deps.sh installs it)";
    dir_ = std::make_unique<TempDir>();
    cluster_ = std::make_unique<LocalKubeCluster>(
        *dir_, KubeClusterOptions{QSYNC_KUBE_TEST_SERVER_BIN, QSYNC_OPERATOR_BIN, QSYNC_BIN_DIR, kubectl});
    KubectlResult crds = cluster_->kubectl({"apply", "-f", kSource + "/crds/"});
    ASSERT_EQ(crds.code, 0) << crds.err;
    master_port_ = free_tcp_port();
  }

  void TearDown() override {
    if (cluster_ && HasFailure()) {
      std::string pods;
      for (const char* job : {"fmnist-cpu", "fmnist-killed", "fmnist-handover", "fmnist-suspend", "fmnist-crash"})
        for (int rank = 0; rank < 2; ++rank) {
          const std::string name = std::string(job) + "-worker-" + std::to_string(rank);
          const std::string log = cluster_->pod_log("default", name);
          if (!log.empty()) pods += "--- pod " + name + "\n" + log.substr(log.size() > 3000 ? log.size() - 3000 : 0);
        }
      std::cerr << cluster_->failure_report() << "\n=== worker pod logs (tails)\n" << pods;
    }
    cluster_.reset();
  }

  void expect_ok(const std::vector<std::string>& args) {
    KubectlResult r = cluster_->kubectl(args);
    EXPECT_EQ(r.code, 0) << "kubectl " << args[0] << " failed: " << r.err;
  }

  // Nodes train-0 and infer-0, labelled with this machine's classes, and their device profiles.
  void create_nodes_and_profiles() {
    expect_ok({"apply", "-f", kNodesFile});
    const std::string train = class_here("cpu-avx512"), infer = class_here("cpu-avx2");
    expect_ok({"label", "node", "train-0", "qsync.dev/pool=training", "qsync.dev/device-class=" + train, "--overwrite"});
    expect_ok({"label", "node", "infer-0", "qsync.dev/pool=inference", "qsync.dev/device-class=" + infer, "--overwrite"});
    for (const std::string& c : std::set<std::string>{train, infer}) {
      const std::string file = measured_profile(c);
      ASSERT_FALSE(file.empty());
      const std::string cm = "qsync-profile-mlp-" + c + "-b" + std::to_string(kLocalBatch);
      expect_ok({"create", "configmap", "-n", "default", cm, "--from-file=profile.json=" + file});
      expect_ok({"label", "configmap", "-n", "default", cm, "qsync.dev/device-profile=true"});
    }
  }

  // `qsync-worker profile` of the MLP on class `c`, measured once per build of qsync-worker (a
  // cache beside the test dirs: every test of this file runs in its own process).
  std::string measured_profile(const std::string& c) {
    namespace fs = std::filesystem;
    const std::string worker = std::string(QSYNC_BIN_DIR) + "/qsync-worker";
    const fs::path cache = fs::temp_directory_path() / "qsync_e2e_profiles";
    const fs::path file = cache / ("mlp-" + c + "-b" + std::to_string(kLocalBatch) + ".json");
    std::error_code ec;
    if (fs::exists(file) && fs::last_write_time(file, ec) > fs::last_write_time(worker, ec)) return file.string();
    fs::create_directories(cache);
    const std::string partial = file.string() + "." + std::to_string(::getpid());
    SpawnOptions profile;
    profile.args = {worker, "profile", "--model", "mlp", "--device-class", c, "--batch", std::to_string(kLocalBatch),
                    "--out", partial};
    profile.stderr_path = dir_->file("profile-" + c + ".err");
    Process p(profile);
    std::optional<int> code = p.wait_for(60s);
    EXPECT_EQ(code, std::optional<int>(0)) << p.err();
    if (code != std::optional<int>(0)) return "";
    fs::rename(partial, file);
    return file.string();
  }

  // Applies the example job renamed to `name`, with text edits; returns kubectl's result.
  KubectlResult apply_job(const std::string& name, const std::vector<std::pair<std::string, std::string>>& edits = {}) {
    std::string text = replaced(read_text(kJobFile), "fmnist-cpu", name);
    for (const auto& [from, to] : edits) text = replaced(text, from, to);
    return cluster_->kubectl({"apply", "-f", dir_->write(name + ".yaml", text)});
  }

  std::string phase(const std::string& job) { return cluster_->jsonpath({"htj", job}, "{.status.phase}"); }

  std::string wait_phase(const std::string& job, const std::string& want, std::chrono::seconds timeout) {
    std::string now;
    poll_until(
        [&] {
          now = phase(job);
          if (now == want) return true;
          std::this_thread::sleep_for(300ms);
          return false;
        },
        timeout);
    return now;
  }

  json job_object(const std::string& job) {
    KubectlResult r = cluster_->kubectl({"get", "htj", job, "-o", "json"});
    EXPECT_EQ(r.code, 0) << r.err;
    return r.code == 0 ? json::parse(r.out) : json::object();
  }

  json pod_object(const std::string& name) {
    KubectlResult r = cluster_->kubectl({"get", "pod", name, "-o", "json"});
    return r.code == 0 ? json::parse(r.out) : json();
  }

  // The highest step a pod's worker logged (its --log-json lines in the kubelet's log).
  int64_t logged_step(const std::string& pod) {
    return last_logged_step(dir_->write("steps-" + pod + ".jsonl", cluster_->pod_log("default", pod)));
  }

  static std::string condition_status(const json& job, const std::string& type) {
    for (const json& c : job["status"].value("conditions", json::array()))
      if (c.value("type", "") == type) return c.value("status", "");
    return "";
  }

  std::unique_ptr<TempDir> dir_;
  std::unique_ptr<LocalKubeCluster> cluster_;
  int master_port_ = 0;
};

}  // namespace qsync::test
