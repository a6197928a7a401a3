// File: tests/e2e/operator_rbac_test.cpp
// The chart's RBAC against what qsync-operator really calls. The Kubernetes API test server runs
// in-process (no kubelet: the test plays the kubelet by writing pod status directly, which the
// server's request counter does not see); the real qsync-operator binary runs against it with
// leader election on (a Lease), every namespace watched, as the chart deploys it. The test
// creates the CRD, two GPU Nodes (nvidia.com/gpu.product Tesla-T4 and NVIDIA-A100-SXM4-80GB:
// built-in device estimates), and a HybridTrainingJob, then drives it through its life: pods
// created, running, rank 0 Failed (a whole-job restart: the pods deleted and recreated), all
// pods Succeeded (cleanup per cleanPodPolicy), then ttlSecondsAfterFinished (the operator
// deletes the job). A second job is deleted by the test while running. Then every (verb, group,
// resource) in the server's request summary (GET /_test/requests?summary=1) must be granted by
// charts/qsync/rbac-contract.yaml; contract rules never exercised are printed, and the ones
// this life necessarily exercises must have been.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <functional>
#include <iostream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>

#include <nlohmann/json.hpp>

#include "tests/e2e/process.h"
#include "tests/kube_api_server/api_server.h"
#include "tests/kube_api_server/yaml_json.h"
#include "tests/operator/cluster_objects.h"

#ifndef QSYNC_OPERATOR_BIN
#error "QSYNC_OPERATOR_BIN must name the qsync-operator binary"
#endif
#ifndef QSYNC_SOURCE_DIR
#error "QSYNC_SOURCE_DIR must name the repository root (for crds/ and charts/)"
#endif

namespace qsync {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using Rule = std::tuple<std::string, std::string, std::string>;  // (group, resource, verb)

const char* const HTJ = "qsync.dev/v1alpha1";

// A GPU node whose pool label is its name, with the resources a real one reports.
json gpu_node(const std::string& name, const std::string& gpu_product) {
  return operator_test::ready_node(name, {{"qsync.dev/pool", name}, {"nvidia.com/gpu.product", gpu_product}},
                                   {{"cpu", "8"}, {"memory", "32Gi"}, {"nvidia.com/gpu", "1"}});
}

json training_job(const std::string& name) {
  json spec = operator_test::two_pool_job_spec("mlp", "a100", "t4");
  spec.merge_patch({{"checkpoint", {{"intervalSteps", 5}}},
                    {"runPolicy", {{"backoffLimit", 2}, {"cleanPodPolicy", "All"}, {"ttlSecondsAfterFinished", 1}}}});
  return operator_test::hybrid_training_job(name, spec);
}

// Polls every 50 ms for up to 30 s (generous: the machine is shared).
bool eventually(const std::function<bool()>& done) { return test::poll_until(done, 30s); }

std::set<Rule> contract_rules() {
  const std::string path = std::string(QSYNC_SOURCE_DIR) + "/charts/qsync/rbac-contract.yaml";
  const json contract = kube_test::yaml_to_json(test::read_text(path));
  std::set<Rule> rules;
  for (const json& r : contract.at("rules")) {
    for (const json& verb : r.at("verbs")) rules.insert({r.at("apiGroup").get<std::string>(), r.at("resource").get<std::string>(), verb.get<std::string>()});
  }
  return rules;
}

std::string describe(const Rule& r) {
  const auto& [group, resource, verb] = r;
  return verb + " " + (group.empty() ? "core" : group) + "/" + resource;
}

class OperatorRbacTest : public ::testing::Test {
 protected:
  void SetUp() override {
    kube_test::ServerOptions options;
    options.request_log_size = 400;
    server_ = std::make_unique<kube_test::ApiServer>(options);
    server_->start();
    server_->put_object(
        kube_test::yaml_to_json(test::read_text(std::string(QSYNC_SOURCE_DIR) + "/crds/qsync.dev_hybridtrainingjobs.yaml")));
    server_->put_object(gpu_node("a100", "NVIDIA-A100-SXM4-80GB"));
    server_->put_object(gpu_node("t4", "Tesla-T4"));
  }

  void start_operator() {
    test::SpawnOptions o;
    o.args = {QSYNC_OPERATOR_BIN, "--kubeconfig", server_->write_kubeconfig(dir_.file("kubeconfig")), "--leader-elect=true",
              "--leader-election-namespace", "default", "--metrics-port", std::to_string(test::free_tcp_port()),
              "--health-port", std::to_string(test::free_tcp_port()), "--workers", "2",
              "--gpu-ranks-on-cpu"};  // the test nodes' nvidia.com/gpu are stand-ins: GPU ranks run on CPUs
    o.stdout_path = dir_.file("operator.out");
    o.stderr_path = dir_.file("operator.err");
    operator_ = std::make_unique<test::Process>(o);
  }

  std::vector<json> pods() { return server_->list_objects("v1", "pods", "default"); }
  json job(const std::string& name) { return server_->get_object(HTJ, "hybridtrainingjobs", "default", name); }
  std::string phase(const std::string& name) {
    const json j = job(name);
    return j.is_object() && j.contains("status") ? j["status"].value("phase", "") : "";
  }
  int64_t restarts(const std::string& name) {
    const json j = job(name);
    return j.is_object() && j.contains("status") ? j["status"].value("restarts", int64_t{0}) : 0;
  }
  std::vector<json> pods_of(const std::string& job_name) {
    std::vector<json> out;
    for (const json& p : pods()) {
      for (const json& ref : p["metadata"].value("ownerReferences", json::array())) {
        if (ref.value("name", "") == job_name && !p["metadata"].contains("deletionTimestamp")) out.push_back(p);
      }
    }
    return out;
  }
  // What the kubelet would write: the pod's phase (and a container state for Failed).
  void set_pod_phase(json pod, const std::string& phase) {
    pod["status"] = {{"phase", phase}};
    if (phase == "Failed") {
      pod["status"]["containerStatuses"] = json::array(
          {{{"name", "worker"}, {"state", {{"terminated", {{"exitCode", 1}, {"reason", "Error"}}}}}}});
    }
    server_->put_object(pod);
  }
  std::string context() {
    return "\n--- operator stderr ---\n" + (operator_ ? operator_->err() : std::string()) +
           "\n--- last exchanges ---\n" + server_->recent_requests_text();
  }

  test::TempDir dir_;
  std::unique_ptr<kube_test::ApiServer> server_;
  std::unique_ptr<test::Process> operator_;
};

TEST_F(OperatorRbacTest, EveryCallTheOperatorMakesIsGrantedByTheContract) {
  start_operator();
  ASSERT_TRUE(eventually([&] { return server_->list_objects("coordination.k8s.io/v1", "leases", "default").size() == 1; }))
      << "the operator took no Lease" << context();

  // Job 1: plan, pods, a failed rank, a whole-job restart, success, cleanup, TTL deletion.
  server_->put_object(training_job("life"));
  ASSERT_TRUE(eventually([&] { return pods_of("life").size() == 2; })) << "no pods for job life" << context();
  for (const json& p : pods_of("life")) set_pod_phase(p, "Running");
  ASSERT_TRUE(eventually([&] { return phase("life") == "Running"; })) << phase("life") << context();
  std::set<std::string> first_uids;
  for (const json& p : pods_of("life")) first_uids.insert(p["metadata"]["uid"].get<std::string>());
  set_pod_phase(pods_of("life").front(), "Failed");
  ASSERT_TRUE(eventually([&] {
    const auto now = pods_of("life");
    if (restarts("life") < 1 || now.size() != 2) return false;
    for (const json& p : now) {
      if (first_uids.count(p["metadata"]["uid"].get<std::string>())) return false;
    }
    return true;
  })) << "no whole-job restart after rank 0 failed" << context();
  for (const json& p : pods_of("life")) set_pod_phase(p, "Running");
  for (const json& p : pods_of("life")) set_pod_phase(p, "Succeeded");
  // ttlSecondsAfterFinished: 1 -> the operator deletes the job (its pods go with cleanPodPolicy All).
  ASSERT_TRUE(eventually([&] { return job("life").is_null(); })) << "job life was not deleted after its TTL; phase "
                                                                  << phase("life") << context();

  // Job 2: deleted by the user while running (the operator sees its children vanish).
  server_->put_object(training_job("gone"));
  ASSERT_TRUE(eventually([&] { return pods_of("gone").size() == 2; })) << "no pods for job gone" << context();
  ASSERT_EQ(server_->call("DELETE", "/apis/qsync.dev/v1alpha1/namespaces/default/hybridtrainingjobs/gone").status, 200);
  ASSERT_TRUE(eventually([&] { return job("gone").is_null() && pods_of("gone").empty(); })) << context();
  std::this_thread::sleep_for(1s);  // a few more reconciles and lease renewals
  operator_->signal(SIGTERM);
  ASSERT_TRUE(operator_->wait_for(30s).has_value()) << "the operator did not stop on SIGTERM" << context();

  // The operator's calls: the summary less the test's one DELETE (the test's other writes go
  // through put_object, which bypasses HTTP and the counter).
  const std::set<Rule> contract = contract_rules();
  std::set<Rule> used;
  std::ostringstream table;
  const json summary = server_->request_summary();
  for (const json& row : summary.at("requests")) {
    int64_t count = row["count"].get<int64_t>();
    Rule rule{row["group"].get<std::string>(), row["resource"].get<std::string>(), row["verb"].get<std::string>()};
    if (rule == Rule{"qsync.dev", "hybridtrainingjobs", "delete"}) --count;  // the test's own
    if (count <= 0) continue;
    used.insert(rule);
    table << "  " << describe(rule) << ": " << count << " (" << row["failed"] << " failed)\n";
  }
  std::cout << "qsync-operator's API calls:\n" << table.str();
  for (const Rule& r : used) {
    EXPECT_TRUE(contract.count(r)) << "qsync-operator calls " << describe(r)
                                   << ", which charts/qsync/rbac-contract.yaml (and so the chart's RBAC) does not "
                                      "grant: add it to the contract and the chart's _rbac_rules.tpl, or stop calling it";
  }
  // Rules this life must exercise: the informers, the children, status, events, the Lease, TTL.
  const std::set<Rule> required = {
      {"qsync.dev", "hybridtrainingjobs", "list"},    {"qsync.dev", "hybridtrainingjobs", "watch"},
      {"qsync.dev", "hybridtrainingjobs", "delete"},  {"", "pods", "list"},
      {"", "pods", "watch"},                          {"", "pods", "create"},
      {"", "pods", "delete"},                         {"", "services", "create"},
      {"", "configmaps", "create"},                   {"", "events", "create"},
      {"", "nodes", "list"},                          {"coordination.k8s.io", "leases", "get"},
      {"coordination.k8s.io", "leases", "create"},    {"coordination.k8s.io", "leases", "update"},
  };
  for (const Rule& r : required) {
    EXPECT_TRUE(used.count(r)) << "the job's life should have made qsync-operator " << describe(r)
                               << " but it never did" << context();
  }
  const bool status_written = used.count({"qsync.dev", "hybridtrainingjobs/status", "update"}) ||
                              used.count({"qsync.dev", "hybridtrainingjobs/status", "patch"});
  EXPECT_TRUE(status_written) << "qsync-operator never wrote a job's status" << context();
  std::ostringstream unused;
  for (const Rule& r : contract) {
    if (!used.count(r)) unused << "  " << describe(r) << "\n";
  }
  std::cout << "contract rules this test never saw exercised (granted but unused here):\n"
            << (unused.str().empty() ? "  none\n" : unused.str());
}

}  // namespace
}  // namespace qsync
