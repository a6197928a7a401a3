// File: tests/e2e/borrowing_e2e_test.cpp
// Off-peak borrowing end to end, for real (issue 16): qsync-kube-test-server with its local
// kubelet and controllers (a Deployment controller, a GPU scheduler), an inference Deployment of
// qsync-test-inference-server whose replicas count the requests they serve, a real Prometheus
// scraping them (file-based discovery of the live replicas) and the operator, a load generator
// that rises and falls, and qsync-operator asking Prometheus for the demand. (On two CPU ranks
// of one 2-core machine the planner predicts no gain from growing, so minGrowthPercent -100
// grows regardless.) The job (the zoo
// MLP, one training rank plus one rank on a GPU the Deployment lends) lends -> grows -> reclaims
// -> shrinks, twice, then finishes; the operator is restarted in the middle of a resize.
// Asserted: the inference replicas never go below minServingReplicas, every reclaim is Ready
// within reclaimGraceSeconds (the operator's measurement and the test's own), no duplicate or
// orphaned pods after the restart, the training loss continues from the checkpoint across every
// resize (each attempt resumes at the step the previous one checkpointed on SIGTERM), and
// Prometheus sees the operator's borrowing metrics. Skipped without kubectl or Prometheus.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "kernels/device_class.h"
#include "tests/e2e/inference_load.h"
#include "tests/e2e/kube_cluster.h"
#include "tests/e2e/process.h"
#include "tests/support/http_client.h"
#include "tests/support/prometheus_server.h"

namespace qsync::test {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

const std::string kSource = QSYNC_SOURCE_DIR;
constexpr int kSteps = 8000;  // enough that the two lend cycles end before training does (150-200 steps/s on one rank here)
constexpr int kCheckpointEvery = 20;
constexpr int kGrace = 60;
constexpr double kHigh = 15, kLow = 3;  // requests/s: 2 replicas' worth (10 each), and 1
const char* kJobPath = "/apis/qsync.dev/v1alpha1/namespaces/default/hybridtrainingjobs/borrow";
const char* kChatPath = "/apis/apps/v1/namespaces/default/deployments/chat";

std::string class_here(const std::string& name) { return device_class_fallback(device_class_by_name(name)).name; }

std::string nodes_yaml() {
  std::string out;
  for (const auto& [name, pool, cls, gpus] :
       std::vector<std::tuple<std::string, std::string, std::string, int>>{{"train-0", "training", class_here("cpu-avx512"), 1},
                                                                             {"infer-0", "inference", class_here("cpu-avx2"), 2}})
    out += "apiVersion: v1\nkind: Node\nmetadata:\n  name: " + name + "\n  labels:\n    kubernetes.io/hostname: " + name +
           "\n    qsync.dev/pool: " + pool + "\n    qsync.dev/device-class: " + cls +
           "\nstatus:\n  allocatable: {cpu: \"1\", memory: 4Gi, nvidia.com/gpu: \"" + std::to_string(gpus) +
           "\"}\n  conditions:\n    - {type: Ready, status: \"True\"}\n---\n";
  return out;
}

std::string chat_yaml() {
  return R"(apiVersion: apps/v1
kind: Deployment
metadata:
  name: chat
  annotations: {qsync.dev/lendable: "true"}
spec:
  replicas: 2
  selector: {matchLabels: {app: chat}}
  template:
    metadata: {labels: {app: chat}}
    spec:
      nodeSelector: {qsync.dev/pool: inference}
      terminationGracePeriodSeconds: 5
      containers:
        - name: serve
          image: qsync-test-inference-server
          command: [/usr/local/bin/qsync-test-inference-server, --port-dir, /var/run/ports, --service-ms, "1"]
          env:
            - name: POD_NAME
              valueFrom: {fieldRef: {fieldPath: metadata.name}}
          resources: {limits: {nvidia.com/gpu: 1}}
          volumeMounts: [{name: ports, mountPath: /var/run/ports}]
      volumes: [{name: ports, persistentVolumeClaim: {claimName: chat-ports}}]
)";
}

std::string job_yaml() {
  return std::string(R"(apiVersion: qsync.dev/v1alpha1
kind: HybridTrainingJob
metadata: {name: borrow}
spec:
  model: {zoo: mlp}
  data: {path: /usr/share/datasets/fashion-mnist}
  optimizer: {name: adamw, lr: 0.002}
  steps: )") + std::to_string(kSteps) + R"(
  globalBatch: 64
  seed: 1
  evalLimit: 500
  checkpoint: {intervalSteps: )" + std::to_string(kCheckpointEvery) + R"(, volume: {claimName: borrow-checkpoints}}
  planning: {allocator: greedy, precision: fp32}
  elasticPolicy: {minRanks: 1, maxRanks: 2, growCooldownSeconds: 5, minGrowthPercent: -100}
  pool:
    training:
      - {name: train, nodeSelector: {qsync.dev/pool: training}, count: 1, gpusPerRank: 1}
    inference:
      - name: infer
        nodeSelector: {qsync.dev/pool: inference}
        count: 1
        gpusPerRank: 1
        borrow:
          workload: {name: chat}
          minServingReplicas: 1
          reclaimGraceSeconds: )" + std::to_string(kGrace) + R"(
          lendCooldownSeconds: 5
          demand:
            prometheus: {query: 'sum(rate(qsync_test_inference_requests_total[10s]))'}
            requestsPerReplica: 10
            headroomPercent: 0
            maxSampleAgeSeconds: 30
  runPolicy: {backoffLimit: 2, cleanPodPolicy: All}
)";
}

// One attempt of rank 0, from its --log-json lines in the kubelet's log (all attempts of a pod
// name are appended to one file).
struct Attempt {
  int64_t resumed = -1, stopped = -1;  // "resumed from ... at step N", "stop requested: checkpointing at step N"
  std::vector<std::pair<int64_t, double>> steps;  // (step, loss) as logged
};

std::vector<Attempt> attempts_of(const std::string& log) {
  std::vector<Attempt> out;
  std::istringstream in(log);
  static const std::regex resumed(R"(resumed from .* at step ([0-9]+))"), stopped(R"(checkpointing at step ([0-9]+))");
  for (std::string line; std::getline(in, line);) {
    const json e = json::parse(line, nullptr, false);
    if (!e.is_object()) continue;
    const std::string event = e.value("event", "");
    if (event == "start") out.emplace_back();
    if (out.empty()) continue;
    std::smatch m;
    const std::string text = e.value("text", "");
    if (event == "message" && std::regex_search(text, m, resumed)) out.back().resumed = std::stoll(m[1]);
    if (event == "message" && std::regex_search(text, m, stopped)) out.back().stopped = std::stoll(m[1]);
    if (event == "step") out.back().steps.emplace_back(e.value("step", int64_t(0)), e.value("loss", 0.0));
  }
  return out;
}

class BorrowingE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string kubectl = find_kubectl();
    if (kubectl.empty()) GTEST_SKIP() << "kubectl is not installed (scripts/install-deps.sh installs it)";
    if (!PrometheusServer::available()) GTEST_SKIP() << PrometheusServer::missing_message();
    dir_ = std::make_unique<TempDir>();
    KubeClusterOptions o{QSYNC_KUBE_TEST_SERVER_BIN, QSYNC_OPERATOR_BIN, QSYNC_BIN_DIR, kubectl};
    o.controllers = true;
    o.alarm_seconds = 900;
    cluster_ = std::make_unique<LocalKubeCluster>(*dir_, o);
    ASSERT_EQ(cluster_->kubectl({"apply", "-f", kSource + "/crds/"}).code, 0);
  }
  void TearDown() override {
    load_.reset();
    monitor_.reset();
    if (cluster_ && HasFailure()) {
      std::cerr << cluster_->failure_report();
      for (const char* pod : {"borrow-worker-0", "borrow-worker-1"}) {
        const std::string log = cluster_->pod_log("default", pod);
        std::cerr << "--- pod " << pod << "\n" << log.substr(log.size() > 4000 ? log.size() - 4000 : 0);
      }
      if (prom_) std::cerr << "--- prometheus targets: " << prom_->targets_health() << "\n";
    }
    prom_.reset();
    cluster_.reset();
  }

  void ok(const std::vector<std::string>& args) {
    const KubectlResult r = cluster_->kubectl(args);
    ASSERT_EQ(r.code, 0) << "kubectl " << args[0] << ": " << r.err;
  }
  json get(const std::string& path) {
    try {
      const HttpResponse r = http_get("127.0.0.1", cluster_->server_port(), path, 5s);
      return r.status == 200 ? json::parse(r.body, nullptr, false) : json();
    } catch (const std::exception&) {
      return json();
    }
  }
  json job_status() {
    const json j = get(kJobPath);
    return j.is_object() ? j.value("status", json::object()) : json::object();
  }
  std::vector<json> pods(const std::string& selector) {
    const json list = get("/api/v1/namespaces/default/pods?labelSelector=" + url_encode(selector));
    std::vector<json> out;
    if (list.is_object())
      for (const json& p : list.value("items", json::array())) out.push_back(p);
    return out;
  }
  int64_t world() { return int64_t(job_status().value(json::json_pointer("/plan/ranks"), json::array()).size()); }
  int64_t logged_step() {
    int64_t step = 0;
    for (const Attempt& a : attempts_of(cluster_->pod_log("default", "borrow-worker-0")))
      if (!a.steps.empty()) step = std::max(step, a.steps.back().first);
    return step;
  }
  // Waits for `condition`, failing with `what` and the job's status when it does not come.
  bool wait(const std::string& what, std::chrono::seconds timeout, const std::function<bool()>& condition) {
    const bool met = poll_until(
        [&] {
          if (condition()) return true;
          std::this_thread::sleep_for(200ms);
          return false;
        },
        timeout);
    EXPECT_TRUE(met) << "timed out waiting for " << what << "; status: " << job_status().dump(2);
    return met;
  }
  bool running_at(int64_t ranks) {
    const json s = job_status();
    return s.value("phase", "") == "Running" && world() == ranks && int64_t(pods("qsync.dev/job=borrow").size()) == ranks;
  }
  int64_t reclaims() { return job_status().value(json::json_pointer("/lending/0/reclaims"), int64_t(0)); }
  void mark(const std::string& what) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    std::cerr << "[borrowing e2e] " << int(elapsed) << " s: " << what << " (step " << logged_step() << ", world " << world() << ", phase "
              << job_status().value("phase", "") << ", resizes " << job_status().value("resizes", 0) << ")\n";
  }

  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::unique_ptr<TempDir> dir_;
  std::unique_ptr<LocalKubeCluster> cluster_;
  std::unique_ptr<PrometheusServer> prom_;
  std::unique_ptr<InferenceLoad> load_;
  std::unique_ptr<ReplicaMonitor> monitor_;
};

TEST_F(BorrowingE2eTest, LendsGrowsReclaimsShrinksAndFinishes) {
  // Nodes, the inference Deployment (2 replicas, 1 GPU each: infer-0's two GPUs), its load.
  ok({"apply", "-f", dir_->write("nodes.yaml", nodes_yaml())});
  ok({"apply", "-f", dir_->write("chat.yaml", chat_yaml())});
  const std::string ports = cluster_->kubelet_root() + "/claims/default/chat-ports";
  load_ = std::make_unique<InferenceLoad>(ports, dir_->file("chat-targets.json"));
  load_->set_rate(kHigh);
  monitor_ = std::make_unique<ReplicaMonitor>(cluster_->server_port(), kChatPath);

  // Prometheus scrapes the live replicas (file SD) and the operator; the operator asks it.
  PrometheusServerConfig pc;
  pc.file_sd_files = {dir_->file("chat-targets.json")};
  const int operator_port = cluster_->reserve_operator_metrics_port();
  pc.targets = {{"127.0.0.1:" + std::to_string(operator_port), {{"app", "qsync-operator"}}}};
  prom_ = std::make_unique<PrometheusServer>(pc);
  ASSERT_TRUE(wait("the demand in Prometheus", 60s, [&] {
    const json r = prom_->query("sum(rate(qsync_test_inference_requests_total[10s]))");
    return r.size() == 1 && std::stod(r[0]["value"][1].get<std::string>()) > 0.7 * kHigh;
  }));
  monitor_->arm();  // from here the replicas must never go below minServingReplicas (1)
  const std::vector<std::string> operator_args = {"--prometheus-url", prom_->url()};
  const int master_port = free_tcp_port();
  cluster_->start_operator(master_port, operator_args);
  // Profiles of the MLP for both classes, then the job.
  for (const std::string& c : std::set<std::string>{class_here("cpu-avx512"), class_here("cpu-avx2")}) {
    SpawnOptions profile;
    const std::string file = dir_->file("profile-" + c + ".json");
    profile.args = {std::string(QSYNC_BIN_DIR) + "/qsync-worker", "profile", "--model", "mlp", "--device-class", c,
                    "--batch", "32", "--out", file};
    Process p(profile);
    ASSERT_EQ(p.wait_for(120s), std::optional<int>(0));
    const std::string cm = "qsync-profile-mlp-" + c;
    ok({"create", "configmap", cm, "--from-file=profile.json=" + file});
    ok({"label", "configmap", cm, "qsync.dev/device-profile=true"});
  }
  ok({"apply", "-f", dir_->write("job.yaml", job_yaml())});

  // A: demand needs both replicas: the job trains on its own rank.
  ASSERT_TRUE(wait("the job running on 1 rank", 120s, [&] { return running_at(1) && logged_step() >= 50; }));
  mark("phase A: training alone");
  std::vector<int64_t> worlds = {1};
  for (int cycle = 0; cycle < 2; ++cycle) {
    // Demand falls: the operator lends a replica's GPU and the job grows onto it.
    load_->set_rate(kLow);
    if (cycle == 0) {
      // The operator restarts in the middle of the resize.
      ASSERT_TRUE(wait("the grow to begin", 90s, [&] { return job_status().value("resizes", 0) >= 1; }));
      mark("resize began: restarting the operator");
      EXPECT_EQ(cluster_->stop_operator(), std::optional<int>(0));
      std::this_thread::sleep_for(1s);
      cluster_->start_operator(master_port, operator_args);
    }
    ASSERT_TRUE(wait("the job running on 2 ranks", 120s, [&] { return running_at(2); }));
    const int64_t grown = logged_step();
    mark("grew to 2 ranks");
    worlds.push_back(2);
    // No duplicate or orphaned pods: exactly the current attempt's ranks, and the replicas set.
    const json s = job_status();
    const std::string attempt = std::to_string(s.value("restarts", 0) + s.value("resizes", 0));
    std::set<std::string> names;
    for (const json& p : pods("qsync.dev/job=borrow")) {
      EXPECT_EQ(p["metadata"]["labels"]["qsync.dev/attempt"], attempt) << p["metadata"].dump();
      EXPECT_EQ(p["metadata"]["ownerReferences"][0]["name"], "borrow");
      names.insert(p["metadata"]["name"].get<std::string>());
    }
    EXPECT_EQ(names, (std::set<std::string>{"borrow-worker-0", "borrow-worker-1"}));
    EXPECT_TRUE(wait("one chat replica", 30s, [&] { return pods("app=chat").size() == 1u; }));
    EXPECT_EQ(s.value("borrowedDevices", 0), 1);
    ASSERT_TRUE(wait("progress on 2 ranks", 120s, [&] { return logged_step() >= grown + 100; }));
    mark("trained on 2 ranks");

    // Demand returns: reclaim; the job shrinks; the replica is back within the grace.
    const int64_t before = reclaims();
    load_->set_rate(kHigh);
    ASSERT_TRUE(wait("the reclaim", 120s, [&] { return reclaims() > before; }));
    ASSERT_TRUE(wait("the job running on 1 rank again", 120s, [&] { return running_at(1); }));
    mark("reclaimed and shrank");
    worlds.push_back(1);
    const int64_t shrunk = logged_step();
    ASSERT_TRUE(wait("progress on 1 rank", 120s, [&] { return logged_step() >= shrunk + 50; }));
  }
  ASSERT_LT(logged_step(), kSteps) << "the job finished before the scenario did: raise kSteps";
  ASSERT_TRUE(wait("the job to succeed", 300s, [&] { return job_status().value("phase", "") == "Succeeded"; }));
  mark("succeeded");

  // Inference never went below minServingReplicas; every reclaim within its grace, by the
  // operator's measurement and by the test's own (spec.replicas up -> readyReplicas caught up).
  EXPECT_GE(monitor_->lowest_ready(), 1);
  const json s = job_status();
  EXPECT_EQ(s.value(json::json_pointer("/lending/0/reclaims"), 0), 2);
  EXPECT_EQ(s.value(json::json_pointer("/lending/0/reclaimsMissed"), -1), 0);
  std::vector<double> operator_seconds;
  static const std::regex after(R"(([0-9.]+) s after the reclaim began)");
  const KubectlResult events = cluster_->kubectl({"get", "events", "-o", "json"});
  for (const json& e : json::parse(events.out, nullptr, false).value("items", json::array())) {
    std::smatch m;
    const std::string message = e.value("message", "");
    if (e.value("reason", "") == "ReclaimMissedGrace") ADD_FAILURE() << message;
    // Equal events are aggregated into one with a count (two reclaims of the same latency).
    if (e.value("reason", "") == "Reclaimed" && std::regex_search(message, m, after))
      operator_seconds.insert(operator_seconds.end(), size_t(std::max<int64_t>(1, e.value("count", int64_t(1)))),
                              std::stod(m[1]));
  }
  EXPECT_EQ(operator_seconds.size(), 2u) << events.out;
  std::string report = "reclaim seconds (operator):";
  for (double x : operator_seconds) {
    report += " " + std::to_string(x);
    EXPECT_LE(x, kGrace);
  }
  report += "; (test: spec.replicas up -> Ready):";
  for (const ScaleOut& o : monitor_->scale_outs()) {
    EXPECT_GT(o.ready, 0) << "a scale-out never became Ready";
    report += " " + std::to_string(o.ready - o.at);
    EXPECT_LE(o.ready - o.at, kGrace);
  }
  std::cerr << "[borrowing e2e] " << report << "; requests served " << load_->served() << ", failed " << load_->failed() << "\n";

  // The loss continues across every resize: each attempt resumes at the step the previous one
  // checkpointed when it was stopped, and its first losses are the trained model's.
  const std::vector<Attempt> attempts = attempts_of(cluster_->pod_log("default", "borrow-worker-0"));
  ASSERT_GE(attempts.size(), 5u) << "1 + 4 resizes (+ none for the operator restart)";
  const double initial_loss = attempts[0].steps.empty() ? 0 : attempts[0].steps[0].second;
  for (size_t k = 1; k < attempts.size(); ++k) {
    const Attempt& prev = attempts[k - 1];
    const Attempt& a = attempts[k];
    ASSERT_FALSE(prev.steps.empty());
    ASSERT_FALSE(a.steps.empty()) << "attempt " << k << " logged no step";
    EXPECT_EQ(a.resumed, prev.stopped) << "attempt " << k << " resumed elsewhere than the SIGTERM checkpoint";
    EXPECT_GE(a.resumed, prev.steps.back().first - kCheckpointEvery) << "attempt " << k << " jumped back";
    EXPECT_GT(a.steps.front().first, a.resumed);
    EXPECT_LT(a.steps.front().second, 0.7 * initial_loss) << "attempt " << k << " starts from an untrained model";
    EXPECT_LT(std::abs(a.steps.front().second - prev.steps.back().second), 0.5) << "attempt " << k;
  }
  EXPECT_EQ(attempts.back().steps.back().first, kSteps);

  // Prometheus scraped the operator's borrowing metrics.
  // (Counters start again with each operator process: the restart split them.)
  EXPECT_FALSE(prom_->query("max_over_time(qsync_operator_resizes_total{reason=\"PoolGrew\"}[30m]) >= 1").empty());
  EXPECT_FALSE(prom_->query("sum(qsync_operator_reclaims_total{result=\"within_grace\"}) >= 1").empty());
  EXPECT_FALSE(prom_->query("qsync_operator_reclaim_seconds_count >= 1").empty());
  EXPECT_FALSE(prom_->query("max_over_time(qsync_operator_borrowed_devices{job=\"borrow\"}[10m]) == 1").empty());
}

}  // namespace
}  // namespace qsync::test
