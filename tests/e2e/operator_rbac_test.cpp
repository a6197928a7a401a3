// File: tests/e2e/operator_rbac_test.cpp
// The chart's RBAC against what qsync-operator really calls. The Kubernetes API test server runs
// in-process (no kubelet: the test plays the kubelet by writing pod status directly, which the
// server's request counter does not see); the real qsync-operator binary runs against it with
// leader election on (a Lease), every namespace watched, as the chart deploys it, and a fake
// Prometheus answering every demand query with 0. The test creates the CRD, GPU Nodes
// (nvidia.com/gpu.product Tesla-T4 and NVIDIA-A100-SXM4-80GB: built-in device estimates), and
// HybridTrainingJobs, and drives them through their lives: job "life" has its pods created,
// running, rank 0 Failed (a whole-job restart: the pods deleted, re-planned, recreated), all pods
// Succeeded (cleanup per cleanPodPolicy), then ttlSecondsAfterFinished (the operator deletes
// the job); job "gone" loses a pod behind the operator's back (confirmed with a fresh get) and
// is deleted by the test while running; job "gang" is gang-scheduled (scheduler-plugins'
// coscheduling: its PodGroup exists with minMember 2 before its pods, follows an edited count to
// 3, is deleted when the gang is switched off); job "borrower" borrows from a Deployment and a
// StatefulSet (the finalizer added, both scaled in, then given back when the test deletes it);
// job "queued" is queued in Kueue (its Workload created, rewritten, admitted, preempted, deleted).
// Then the (verb, group, resource) set of the server's request summary (GET
// /_test/requests?summary=1), less the test's own calls, must EQUAL charts/qsync/rbac-contract.yaml
// less its `authorization` rules: a call the contract does not grant fails, and so does a
// granted verb the operator never called.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <functional>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>

#include <nlohmann/json.hpp>

#include "operator/http/http_server.h"
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
json gpu_node(const std::string& name, const std::string& gpu_product, int gpus = 1) {
  return operator_test::ready_node(name, {{"qsync.dev/pool", name}, {"nvidia.com/gpu.product", gpu_product}},
                                   {{"cpu", "8"}, {"memory", "32Gi"}, {"nvidia.com/gpu", std::to_string(gpus)}});
}

// An inference workload (Deployment or StatefulSet) of 2 Ready replicas on pool "infer", opted in
// to lending. No controller runs: only its spec.replicas and annotations matter here.
json inference_workload(const std::string& kind, const std::string& name) {
  json w = {{"apiVersion", "apps/v1"},
            {"kind", kind},
            {"metadata", {{"name", name}, {"namespace", "default"}, {"annotations", {{"qsync.dev/lendable", "true"}}}}},
            {"spec",
             {{"replicas", 2},
              {"selector", {{"matchLabels", {{"app", name}}}}},
              {"template",
               {{"metadata", {{"labels", {{"app", name}}}}},
                {"spec",
                 {{"nodeSelector", {{"qsync.dev/pool", "infer"}}},
                  {"containers",
                   json::array({{{"name", "serve"}, {"image", name + ":1"}, {"resources", {{"limits", {{"nvidia.com/gpu", 1}}}}}}})}}}}}}},
            {"status", {{"replicas", 2}, {"readyReplicas", 2}, {"availableReplicas", 2}, {"observedGeneration", 1}}}};
  if (kind == "StatefulSet") w["spec"]["serviceName"] = name;
  return w;
}

json borrow_entry(const std::string& name, const std::string& kind, const std::string& workload) {
  return {{"name", name},
          {"nodeSelector", {{"qsync.dev/pool", "infer"}}},
          {"count", 1},
          {"gpusPerRank", 1},
          {"borrow",
           {{"workload", {{"kind", kind}, {"name", workload}}},
            {"minServingReplicas", 1},
            {"lendCooldownSeconds", 0},
            {"demand", {{"prometheus", {{"query", "sum(rate(" + workload + "_requests_total[1m]))"}}}, {"requestsPerReplica", 10}}}}}};
}

// One A100 training rank plus a rank on a GPU borrowed from each workload.
json borrowing_job(const std::string& name) {
  json spec = {{"model", {{"zoo", "mlp"}}},
               {"steps", 1000},
               {"globalBatch", 64},
               {"elasticPolicy", {{"minRanks", 1}, {"growCooldownSeconds", 0}}},
               {"pool",
                {{"training", json::array({{{"name", "train"}, {"nodeSelector", {{"qsync.dev/pool", "a100b"}}}, {"count", 1}}})},
                 {"inference", json::array({borrow_entry("chat", "Deployment", "chat"),
                                            borrow_entry("embed", "StatefulSet", "embed")})}}}};
  return operator_test::hybrid_training_job(name, spec);
}

// Gang-scheduled: one A100 training rank, `inference_ranks` on the 4-GPU inference node.
json gang_job(const std::string& name, int inference_ranks, bool gang = true) {
  json spec = operator_test::two_pool_job_spec("mlp", "a100", "infer");
  spec["pool"]["inference"][0]["count"] = inference_ranks;
  if (gang) spec["runPolicy"] = {{"schedulingPolicy", {{"gang", "coscheduling"}, {"scheduleTimeoutSeconds", 120}}}};
  return operator_test::hybrid_training_job(name, spec);
}

// Queued in Kueue's LocalQueue "research": one A100 training rank, `inference_ranks` on the 4-GPU node.
json queued_job(const std::string& name, int inference_ranks) {
  json j = gang_job(name, inference_ranks, false);
  j["metadata"]["labels"] = {{"kueue.x-k8s.io/queue-name", "research"}};
  return j;
}

json training_job(const std::string& name) {
  json spec = operator_test::two_pool_job_spec("mlp", "a100", "t4");
  spec.merge_patch({{"checkpoint", {{"intervalSteps", 5}}},
                    {"runPolicy", {{"backoffLimit", 2}, {"cleanPodPolicy", "All"}, {"ttlSecondsAfterFinished", 1}}}});
  return operator_test::hybrid_training_job(name, spec);
}

// Polls every 50 ms for up to 30 s (generous: the machine is shared).
bool eventually(const std::function<bool()>& done) { return test::poll_until(done, 30s); }

struct Contract {
  std::set<Rule> requested;   // rules the operator's own requests need
  std::set<Rule> authorized;  // rules the API server checks on another call (`authorization`)
};

Contract contract_rules() {
  const std::string path = std::string(QSYNC_SOURCE_DIR) + "/charts/qsync/rbac-contract.yaml";
  const json contract = kube_test::yaml_to_json(test::read_text(path));
  Contract c;
  for (const json& r : contract.at("rules")) {
    for (const json& verb : r.at("verbs")) {
      const Rule rule{r.at("apiGroup").get<std::string>(), r.at("resource").get<std::string>(), verb.get<std::string>()};
      (r.contains("authorization") ? c.authorized : c.requested).insert(rule);
    }
  }
  return c;
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
    server_->put_object(gpu_node("a100b", "NVIDIA-A100-SXM4-80GB"));
    server_->put_object(gpu_node("infer", "Tesla-T4", 4));
    server_->put_object(operator_test::pod_group_crd());
    server_->put_object(inference_workload("Deployment", "chat"));
    server_->put_object(inference_workload("StatefulSet", "embed"));
    // Prometheus as the demand queries see it: no requests at all, so the workloads lend.
    prometheus_ = std::make_unique<http::HttpServer>("127.0.0.1", 0, [](const http::HttpRequest&) {
      http::HandlerResult r;
      r.response.headers["Content-Type"] = "application/json";
      r.response.body = json{{"status", "success"},
                             {"data", {{"resultType", "vector"},
                                       {"result", json::array({{{"metric", json::object()}, {"value", json::array({0, "0"})}}})}}}}
                            .dump();
      return r;
    });
  }

  void start_operator() {
    test::SpawnOptions o;
    o.args = {QSYNC_OPERATOR_BIN, "--kubeconfig", server_->write_kubeconfig(dir_.file("kubeconfig")), "--leader-elect=true",
              "--leader-election-namespace", "default", "--metrics-port", std::to_string(test::free_tcp_port()),
              "--health-port", std::to_string(test::free_tcp_port()), "--workers", "2",
              "--gpu-ranks-on-cpu",
              "--prometheus-url", "http://127.0.0.1:" + std::to_string(prometheus_->port())};  // the test nodes' nvidia.com/gpu are stand-ins: GPU ranks run on CPUs
    o.stdout_path = dir_.file("operator.out");
    o.stderr_path = dir_.file("operator.err");
    operator_ = std::make_unique<test::Process>(o);
  }

  std::vector<json> pods() { return server_->list_objects("v1", "pods", "default"); }
  json job(const std::string& name) { return server_->get_object(HTJ, "hybridtrainingjobs", "default", name); }
  json pod_group(const std::string& name) {
    return server_->get_object("scheduling.x-k8s.io/v1alpha1", "podgroups", "default", name);
  }
  int64_t min_member(const std::string& name) {
    const json g = pod_group(name);
    return g.is_object() ? g["spec"].value("minMember", int64_t{0}) : 0;
  }
  // The job as stored, with another spec (the server bumps its generation).
  void replace_job(const json& edited) {
    json j = job(edited["metadata"]["name"].get<std::string>());
    j["spec"] = edited["spec"];
    server_->put_object(j);
  }
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
  std::unique_ptr<http::HttpServer> prometheus_;
  std::unique_ptr<test::Process> operator_;
  std::map<Rule, int64_t> own_calls_;  // the test's HTTP calls, counted by the server too

  json kueue_workload() {
    const std::vector<json> all = server_->list_objects("kueue.x-k8s.io/v1beta2", "workloads", "default");
    return all.size() == 1 ? all[0] : json();
  }
  void kueue_admit() {
    json wl = kueue_workload();
    wl["status"] = {{"admission", {{"clusterQueue", "gpu-cq"},
                                   {"podSetAssignments", json::array({{{"name", "train"}, {"flavors", {{"nvidia.com/gpu", "a100-flavor"}}}},
                                                                      {{"name", "infer"}, {"flavors", {{"nvidia.com/gpu", "t4-flavor"}}}}})}}},
                    {"conditions", json::array({{{"type", "QuotaReserved"}, {"status", "True"}, {"reason", "QuotaReserved"}},
                                                {{"type", "Admitted"}, {"status", "True"}, {"reason", "Admitted"}}})}};
    server_->put_object(wl);
  }
  void kueue_preempt() {
    json wl = kueue_workload();
    wl["status"]["conditions"].push_back({{"type", "Evicted"}, {"status", "True"}, {"reason", "Preempted"}, {"message", "preempted"}});
    server_->put_object(wl);
  }
  int delete_call(const std::string& group, const std::string& resource, const std::string& path) {
    ++own_calls_[{group, resource, "delete"}];
    return server_->call("DELETE", path).status;
  }
  json workload(const std::string& plural, const std::string& name) {
    return server_->get_object("apps/v1", plural, "default", name);
  }
  int64_t replicas(const std::string& plural, const std::string& name) {
    const json w = workload(plural, name);
    return w.is_object() ? w["spec"].value("replicas", int64_t{-1}) : -1;
  }
};

TEST_F(OperatorRbacTest, TheOperatorCallsExactlyWhatTheContractGrants) {
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

  // Job 2: a pod deleted behind the operator's back (it confirms with a fresh get before
  // recreating), then the job deleted by the user while running.
  server_->put_object(training_job("gone"));
  ASSERT_TRUE(eventually([&] { return pods_of("gone").size() == 2; })) << "no pods for job gone" << context();
  for (const json& p : pods_of("gone")) set_pod_phase(p, "Running");
  ASSERT_TRUE(eventually([&] { return phase("gone") == "Running"; })) << phase("gone") << context();
  ASSERT_EQ(delete_call("", "pods", "/api/v1/namespaces/default/pods/gone-worker-1"), 200);
  ASSERT_TRUE(eventually([&] { return restarts("gone") >= 1 || pods_of("gone").size() == 2; }))
      << "the operator did not react to a vanished pod" << context();
  ASSERT_EQ(delete_call("qsync.dev", "hybridtrainingjobs", "/apis/qsync.dev/v1alpha1/namespaces/default/hybridtrainingjobs/gone"), 200);
  ASSERT_TRUE(eventually([&] { return job("gone").is_null() && pods_of("gone").empty(); })) << context();

  // Job 3: gang-scheduled. Its PodGroup is stored before its pods (a smaller resourceVersion),
  // with minMember = the 2 ranks; an edited count makes it 3 before any pod of the new size; the
  // gang switched off deletes it.
  server_->put_object(gang_job("gang", 1));
  ASSERT_TRUE(eventually([&] { return pods_of("gang").size() == 2; })) << "no pods for job gang; phase " << phase("gang") << context();
  {
    const json group = pod_group("gang");
    ASSERT_TRUE(group.is_object()) << "the gang job's pods exist without a PodGroup" << context();
    EXPECT_EQ(group["spec"]["minMember"], 2);
    EXPECT_EQ(group["spec"]["scheduleTimeoutSeconds"], 120);
    const int64_t group_rv = std::stoll(group["metadata"]["resourceVersion"].get<std::string>());
    for (const json& p : pods_of("gang")) {
      EXPECT_LT(group_rv, std::stoll(p["metadata"]["resourceVersion"].get<std::string>())) << "a pod before its PodGroup";
      EXPECT_EQ(p["metadata"]["labels"].value("scheduling.x-k8s.io/pod-group", ""), "gang");
      EXPECT_EQ(p["spec"].value("schedulerName", ""), "scheduler-plugins-scheduler");
    }
  }
  replace_job(gang_job("gang", 2));
  ASSERT_TRUE(eventually([&] {
    const auto now = pods_of("gang");
    for (const json& p : now) {
      if (p["metadata"].value("annotations", json::object()).value("qsync.dev/world-size", "") == "3") {
        EXPECT_EQ(min_member("gang"), 3) << "a pod of the new size before the PodGroup asked for 3";
      }
    }
    return now.size() == 3 && min_member("gang") == 3;
  })) << "the PodGroup did not follow the edited count; minMember " << min_member("gang") << context();
  replace_job(gang_job("gang", 2, false));
  ASSERT_TRUE(eventually([&] { return pod_group("gang").is_null(); })) << "the PodGroup stayed after the gang was switched off"
                                                                        << context();
  ASSERT_EQ(delete_call("qsync.dev", "hybridtrainingjobs", "/apis/qsync.dev/v1alpha1/namespaces/default/hybridtrainingjobs/gang"), 200);
  ASSERT_TRUE(eventually([&] { return job("gang").is_null() && pods_of("gang").empty(); })) << context();

  // Job 4: borrows a GPU from a Deployment and one from a StatefulSet (no demand: both lend),
  // then is deleted: its finalizer gives both their replicas back.
  server_->put_object(borrowing_job("borrower"));
  ASSERT_TRUE(eventually([&] { return replicas("deployments", "chat") == 1 && replicas("statefulsets", "embed") == 1; }))
      << "the borrowing job did not scale its workloads in; phase " << phase("borrower") << context();
  ASSERT_EQ(delete_call("qsync.dev", "hybridtrainingjobs",
                        "/apis/qsync.dev/v1alpha1/namespaces/default/hybridtrainingjobs/borrower"),
            200);
  ASSERT_TRUE(eventually([&] {
    return job("borrower").is_null() && replicas("deployments", "chat") == 2 && replicas("statefulsets", "embed") == 2;
  })) << "deleting the borrowing job did not give its workloads back" << context();
  // Job 5: queued in Kueue (the test plays Kueue's scheduler by writing the Workload's status):
  // suspended, its Workload created, rewritten for an edited count, admitted on flavors (pods
  // on them), preempted (pods stopped, quota released), then taken out of Kueue (Workload deleted).
  server_->put_object(operator_test::kueue_workload_crd());
  server_->put_object(operator_test::kueue_resource_flavor_crd());
  server_->put_object(operator_test::resource_flavor("a100-flavor", {{"nvidia.com/gpu.product", "NVIDIA-A100-SXM4-80GB"}}));
  server_->put_object(operator_test::resource_flavor("t4-flavor", {{"nvidia.com/gpu.product", "Tesla-T4"}}));
  server_->put_object(queued_job("queued", 1));
  ASSERT_TRUE(eventually([&] { return kueue_workload().is_object(); })) << "no Workload for job queued; phase " << phase("queued")
                                                                         << context();
  EXPECT_EQ(job("queued")["spec"]["runPolicy"]["suspend"], true);
  replace_job(queued_job("queued", 2));
  ASSERT_TRUE(eventually([&] { return kueue_workload()["spec"]["podSets"][1].value("count", 0) == 2; }))
      << "the Workload kept the old count" << context();
  kueue_admit();
  ASSERT_TRUE(eventually([&] { return pods_of("queued").size() == 3; })) << "the admitted job made no pods; phase "
                                                                         << phase("queued") << context();
  kueue_preempt();
  ASSERT_TRUE(eventually([&] { return pods_of("queued").empty() && !kueue_workload()["status"].contains("admission"); }))
      << "the preempted job kept its pods or its quota" << context();
  {
    json j = job("queued");
    j["metadata"]["labels"].erase("kueue.x-k8s.io/queue-name");
    server_->put_object(j);
  }
  ASSERT_TRUE(eventually([&] { return kueue_workload().is_null(); })) << "the Workload stayed after the job left Kueue" << context();
  ASSERT_EQ(delete_call("qsync.dev", "hybridtrainingjobs", "/apis/qsync.dev/v1alpha1/namespaces/default/hybridtrainingjobs/queued"), 200);
  std::this_thread::sleep_for(1s);  // a few more reconciles and lease renewals
  operator_->signal(SIGTERM);
  ASSERT_TRUE(operator_->wait_for(30s).has_value()) << "the operator did not stop on SIGTERM" << context();

  // The operator's calls: the summary less the test's own DELETEs (its other writes go through
  // put_object, which bypasses HTTP and the counter).
  const Contract contract = contract_rules();
  std::set<Rule> used;
  std::ostringstream table;
  const json summary = server_->request_summary();
  for (const json& row : summary.at("requests")) {
    int64_t count = row["count"].get<int64_t>();
    Rule rule{row["group"].get<std::string>(), row["resource"].get<std::string>(), row["verb"].get<std::string>()};
    if (own_calls_.count(rule)) count -= own_calls_[rule];
    if (count <= 0) continue;
    used.insert(rule);
    table << "  " << describe(rule) << ": " << count << " (" << row["failed"] << " failed)\n";
  }
  std::cout << "qsync-operator's API calls:\n" << table.str();
  for (const Rule& r : used) {
    EXPECT_TRUE(contract.requested.count(r)) << "qsync-operator calls " << describe(r)
                                             << ", which charts/qsync/rbac-contract.yaml (and so the chart's RBAC) does not "
                                                "grant: add it to the contract and the chart's _rbac_rules.tpl, or stop calling it";
  }
  // Least privilege: every requested rule of the contract was called in these lives.
  for (const Rule& r : contract.requested) {
    EXPECT_TRUE(used.count(r)) << "charts/qsync/rbac-contract.yaml grants " << describe(r)
                               << " but qsync-operator never called it in these jobs' lives: remove it from the "
                                  "contract and the chart's _rbac_rules.tpl (or, if the API server checks it on "
                                  "another call, give it an `authorization` reason), or exercise the call here";
  }
  for (const Rule& r : contract.authorized) {
    EXPECT_FALSE(used.count(r)) << describe(r) << " is marked `authorization` (never requested) but was requested";
  }
}

}  // namespace
}  // namespace qsync
