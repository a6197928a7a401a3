// File: tests/e2e/shared_pool_e2e_test.cpp
// A job on a shared pool, end to end (issue 17): qsync-kube-test-server with its local kubelet
// and GPU scheduler (which filters taints as kube-scheduler's TaintToleration does), the real
// qsync-operator, kubectl. The pool: training node train-0 (2 A100s, one held by another team's
// pod) and inference node infer-0 (1 T4, tainted dedicated=inference:NoSchedule). The job asks
// first for 2 training ranks (InsufficientCapacity: one GPU is free, no pods), then for 1
// (UntoleratedTaints naming infer-0's taint, no pods), then tolerates the taint in the inference
// entry's podTemplate: one rank on each node, bound by the scheduler (so the toleration reached
// the pod), trained to Succeeded, never more GPUs on train-0 than it has. GPU ranks run on CPUs
// (--gpu-ranks-on-cpu). A second job is gang-scheduled (runPolicy.schedulingPolicy: coscheduling,
// with scheduler-plugins' PodGroup CRD applied): its PodGroup is stored before either worker pod
// with minMember 2, the pods carry its label and schedulerName, and the job trains to Succeeded.
// Skipped without kubectl.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "tests/e2e/kube_cluster.h"
#include "tests/e2e/process.h"
#include "tests/operator/cluster_objects.h"
#include "tests/support/http_client.h"

namespace qsync::test {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

const std::string kSource = QSYNC_SOURCE_DIR;
const char* kJobPath = "/apis/qsync.dev/v1alpha1/namespaces/default/hybridtrainingjobs/shared";

const char* kNodes = R"(apiVersion: v1
kind: Node
metadata:
  name: train-0
  labels: {kubernetes.io/hostname: train-0, qsync.dev/pool: training, nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB}
status:
  allocatable: {cpu: "4", memory: 16Gi, nvidia.com/gpu: "2"}
  conditions: [{type: Ready, status: "True"}]
---
apiVersion: v1
kind: Node
metadata:
  name: infer-0
  labels: {kubernetes.io/hostname: infer-0, qsync.dev/pool: inference, nvidia.com/gpu.product: Tesla-T4}
spec:
  taints: [{key: dedicated, value: inference, effect: NoSchedule}]
status:
  allocatable: {cpu: "4", memory: 16Gi, nvidia.com/gpu: "1"}
  conditions: [{type: Ready, status: "True"}]
)";

// Another team's pod holding one of train-0's two GPUs (a local process, so it is Running).
const char* kHolder = R"(apiVersion: v1
kind: Pod
metadata: {name: other-team, labels: {app: other-team}}
spec:
  nodeName: train-0
  containers:
    - name: hold
      image: busybox
      command: [/bin/sleep, "600"]
      resources: {limits: {nvidia.com/gpu: 1}}
)";

std::string job_yaml(int training_ranks, bool tolerate, bool gang = false) {
  std::string inference = "      - {name: infer, nodeSelector: {qsync.dev/pool: inference}, count: 1}\n";
  if (tolerate)
    inference =
        "      - name: infer\n        nodeSelector: {qsync.dev/pool: inference}\n        count: 1\n"
        "        podTemplate:\n          tolerations: [{key: dedicated, operator: Equal, value: inference, effect: NoSchedule}]\n";
  return R"(apiVersion: qsync.dev/v1alpha1
kind: HybridTrainingJob
metadata: {name: shared}
spec:
  model: {zoo: mlp}
  data: {path: /usr/share/datasets/fashion-mnist}
  optimizer: {name: adamw, lr: 0.002}
  steps: 30
  globalBatch: 64
  seed: 1
  evalLimit: 200
  planning: {allocator: greedy, precision: fp32}
  pool:
    training:
      - {name: train, nodeSelector: {qsync.dev/pool: training}, count: )" +
         std::to_string(training_ranks) + R"(}
    inference:
)" + inference + R"(  runPolicy: {backoffLimit: 1, cleanPodPolicy: None)" +
         (gang ? ", schedulingPolicy: {gang: coscheduling, scheduleTimeoutSeconds: 60}" : "") + R"(}
)";
}

class SharedPoolE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string kubectl = find_kubectl();
    if (kubectl.empty()) GTEST_SKIP() << "kubectl is not installed (scripts/install-deps.sh installs it)";
    dir_ = std::make_unique<TempDir>();
    KubeClusterOptions o{QSYNC_KUBE_TEST_SERVER_BIN, QSYNC_OPERATOR_BIN, QSYNC_BIN_DIR, kubectl};
    o.controllers = true;  // the GPU scheduler binds the workers
    cluster_ = std::make_unique<LocalKubeCluster>(*dir_, o);
    ASSERT_EQ(cluster_->kubectl({"apply", "-f", kSource + "/crds/"}).code, 0);
  }
  void TearDown() override {
    if (cluster_ && HasFailure()) {
      std::cerr << cluster_->failure_report() << "\n--- job status: " << status().dump(2) << "\n";
      for (const char* pod : {"shared-worker-0", "shared-worker-1"}) {
        const std::string log = cluster_->pod_log("default", pod);
        std::cerr << "--- pod " << pod << "\n" << log.substr(log.size() > 3000 ? log.size() - 3000 : 0);
      }
    }
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
  json status() {
    const json j = get(kJobPath);
    return j.is_object() ? j.value("status", json::object()) : json::object();
  }
  std::string planned_reason() {
    for (const json& c : status().value("conditions", json::array()))
      if (c.value("type", "") == "Planned") return c.value("reason", "");
    return "";
  }
  std::vector<json> workers() {
    const json list = get("/api/v1/namespaces/default/pods?labelSelector=qsync.dev%2Fjob%3Dshared");
    return list.is_object() ? list.value("items", json::array()).get<std::vector<json>>() : std::vector<json>{};
  }
  bool wait(const std::string& what, std::chrono::seconds timeout, const std::function<bool()>& condition) {
    const bool met = poll_until(
        [&] {
          if (condition()) return true;
          std::this_thread::sleep_for(200ms);
          return false;
        },
        timeout);
    EXPECT_TRUE(met) << "timed out waiting for " << what << "; status: " << status().dump(2);
    return met;
  }

  std::unique_ptr<TempDir> dir_;
  std::unique_ptr<LocalKubeCluster> cluster_;
};

TEST_F(SharedPoolE2eTest, TaintedInferenceNodeAndOneFreeTrainingGpu) {
  ok({"apply", "-f", dir_->write("nodes.yaml", kNodes)});
  ok({"apply", "-f", dir_->write("holder.yaml", kHolder)});
  ASSERT_TRUE(wait("the other team's pod running", 30s, [&] {
    const json p = get("/api/v1/namespaces/default/pods/other-team");
    return p.is_object() && p.value(json::json_pointer("/status/phase"), std::string()) == "Running";
  }));
  cluster_->start_operator(free_tcp_port());

  // Two training ranks do not fit train-0's one free GPU: the job waits in Planning, no pods.
  ok({"apply", "-f", dir_->write("job-2.yaml", job_yaml(2, false))});
  ASSERT_TRUE(wait("InsufficientCapacity", 60s, [&] { return planned_reason() == "InsufficientCapacity"; }));
  EXPECT_EQ(status().value("phase", ""), "Planning");
  EXPECT_NE(status().value("message", "").find("train-0: 1 free GPUs"), std::string::npos) << status().dump(2);
  EXPECT_TRUE(workers().empty());

  // One fits, but infer-0's taint is not tolerated: still no pods, and the message says why.
  ok({"apply", "-f", dir_->write("job-1.yaml", job_yaml(1, false))});
  ASSERT_TRUE(wait("UntoleratedTaints", 60s, [&] { return planned_reason() == "UntoleratedTaints"; }));
  EXPECT_EQ(status().value("phase", ""), "Planning");
  EXPECT_NE(status().value("message", "").find("infer-0 (dedicated=inference:NoSchedule)"), std::string::npos)
      << status().dump(2);
  EXPECT_TRUE(workers().empty());

  // Tolerated: one rank on each node, bound by the scheduler, trained to the end.
  ok({"apply", "-f", dir_->write("job-ok.yaml", job_yaml(1, true))});
  ASSERT_TRUE(wait("two bound workers", 60s, [&] {
    const std::vector<json> w = workers();
    if (w.size() != 2) return false;
    for (const json& p : w)
      if (p["spec"].value("nodeName", "").empty()) return false;
    return true;
  }));
  for (const json& p : workers()) {
    const std::string kind = p["metadata"]["labels"].value("qsync.dev/pool-kind", "");
    EXPECT_EQ(p["spec"]["nodeName"], kind == "inference" ? "infer-0" : "train-0") << p["metadata"].dump();
    EXPECT_EQ(p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"], "1");
  }
  ASSERT_TRUE(wait("the job to succeed", 120s, [&] { return status().value("phase", "") == "Succeeded"; }));
  for (const json& p : workers()) EXPECT_EQ(p.value(json::json_pointer("/status/phase"), std::string()), "Succeeded");
  const std::string log = cluster_->pod_log("default", "shared-worker-0");
  EXPECT_NE(log.find("\"world_size\":2"), std::string::npos) << log;  // both ranks trained together
  EXPECT_NE(log.find("\"event\":\"done\""), std::string::npos) << log;
  // The other team's pod was never displaced.
  const json holder = get("/api/v1/namespaces/default/pods/other-team");
  EXPECT_EQ(holder.value(json::json_pointer("/status/phase"), std::string()), "Running");
}

TEST_F(SharedPoolE2eTest, AGangScheduledJobHasItsPodGroupBeforeItsPodsAndTrains) {
  ok({"apply", "-f", dir_->write("nodes.yaml", kNodes)});
  ok({"apply", "-f", dir_->write("podgroup-crd.json", operator_test::pod_group_crd().dump())});
  cluster_->start_operator(free_tcp_port());
  ok({"apply", "-f", dir_->write("job-gang.yaml", job_yaml(1, true, true))});
  const char* group_path = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/default/podgroups/shared";
  // From the first pod seen on, the PodGroup is there, stored earlier, asking for both ranks.
  ASSERT_TRUE(wait("two bound workers", 60s, [&] {
    const std::vector<json> w = workers();
    if (w.empty()) return false;
    const json group = get(group_path);
    EXPECT_TRUE(group.is_object()) << "worker pods exist without their PodGroup";
    if (!group.is_object()) return true;
    EXPECT_EQ(group["spec"]["minMember"], 2);
    const int64_t group_rv = std::stoll(group["metadata"]["resourceVersion"].get<std::string>());
    bool bound = w.size() == 2;
    for (const json& p : w) {
      EXPECT_LT(group_rv, std::stoll(p["metadata"]["resourceVersion"].get<std::string>())) << "a pod stored before its PodGroup";
      EXPECT_EQ(p["metadata"]["labels"].value("scheduling.x-k8s.io/pod-group", ""), "shared");
      EXPECT_EQ(p["spec"].value("schedulerName", ""), "scheduler-plugins-scheduler");
      bound = bound && !p["spec"].value("nodeName", "").empty();
    }
    return bound;
  }));
  ASSERT_FALSE(HasFailure());
  EXPECT_EQ(get(group_path)["metadata"]["ownerReferences"][0]["name"], "shared");
  ASSERT_TRUE(wait("the job to succeed", 120s, [&] { return status().value("phase", "") == "Succeeded"; }));
  const std::string log = cluster_->pod_log("default", "shared-worker-0");
  EXPECT_NE(log.find("\"world_size\":2"), std::string::npos) << log;
}

}  // namespace
}  // namespace qsync::test
