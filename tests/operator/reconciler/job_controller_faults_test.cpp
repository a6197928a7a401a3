// File: tests/operator/reconciler/job_controller_faults_test.cpp
// Faults injected into the operator as qsync-operator runs it (a Manager with the job controller,
// informers and owned-object watches) against the in-process API test server: 409 storms on
// every write, watches closed and connections cut (and history compacted, so re-watches answer
// 410) while pods change phase, and the operator restarted while it plans a job, while it creates
// the pods, and while it restarts a job after a worker failed (slow API answers widen each
// window; a crash is the operator's writes refused and its connections cut, then its stop).
// Every test ends in one clear state: exactly the job's pods (one per rank, owned by
// the job, all of the current attempt), the status the cluster implies, no duplicate or orphaned
// pod, and no attempt counted twice.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <set>
#include <thread>

#include "operator/api/crd_schema.h"
#include "operator/api/hybrid_training_job_status.h"
#include "operator/reconciler/job_controller_setup.h"
#include "tests/operator/api_server_fixture.h"
#include "tests/operator/cluster_objects.h"
#include "tests/operator/wait_until.h"

namespace qsync::reconciler {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;
using operator_test::ready_node;

bool eventually(const std::function<bool()>& done, std::chrono::seconds limit = 30s) {
  return operator_test::wait_until(done, limit, std::chrono::milliseconds(20));
}

// A manager with the job controller on its own thread; destroying it is an operator stop.
class RunningOperator {
 public:
  explicit RunningOperator(kube::KubeClient& client) : manager_(&client, options()) {
    JobControllerOptions o;
    o.workers = 2;
    o.reconciler.active_requeue = std::chrono::milliseconds(300);
    parts_ = add_job_controller(manager_, client, o);
    thread_ = std::thread([this] { manager_.run(); });
  }
  ~RunningOperator() {
    manager_.shutdown_signal().request();
    thread_.join();
  }

 private:
  static controller::ManagerOptions options() {
    controller::ManagerOptions o;
    o.graceful_shutdown_timeout = std::chrono::seconds(5);
    return o;
  }
  controller::Manager manager_;
  JobControllerParts parts_;
  std::thread thread_;
};

class JobControllerFaultsTest : public operator_test::ApiServerTest {
 protected:
  JobControllerFaultsTest() {
    server_.put_object(api::hybrid_training_job_crd());
    server_.put_object(ready_node("train-1", {{"qsync.dev/pool", "training"}, {"nvidia.com/gpu.product", "NVIDIA-L4"}}));
    server_.put_object(ready_node("infer-1", {{"qsync.dev/pool", "inference"}, {"nvidia.com/gpu.product", "Tesla-T4"}}));
  }
  // Written straight into the store: a fault rule on writes would refuse kubectl's create too.
  void create_job() {
    server_.put_object(operator_test::hybrid_training_job("fm", operator_test::two_pool_job_spec("cnn", "training", "inference")));
  }
  json job() { return server_.get_object("qsync.dev/v1alpha1", "hybridtrainingjobs", "default", "fm"); }
  api::HybridTrainingJobStatus status() {
    const json j = job();
    return j.contains("status") ? api::hybrid_training_job_status_from_json(j["status"]) : api::HybridTrainingJobStatus{};
  }
  // Pods not being deleted.
  std::vector<json> pods() {
    std::vector<json> out;
    for (const json& p : server_.list_objects("v1", "pods", "default"))
      if (!p["metadata"].contains("deletionTimestamp")) out.push_back(p);
    return out;
  }
  void set_phase(int rank, const std::string& phase, int exit_code = 0) {
    json p = server_.get_object("v1", "pods", "default", "fm-worker-" + std::to_string(rank));
    ASSERT_FALSE(p.is_null()) << "no pod for rank " << rank;
    p["status"] = {{"phase", phase}};
    if (phase == "Failed")
      p["status"]["containerStatuses"] = json::array({{{"name", "worker"}, {"state", {{"terminated", {{"exitCode", exit_code}}}}}}});
    server_.put_object(p);
  }
  // The one clear end state: ranks 0 and 1 exactly once each, owned by this job (a controller
  // reference to its uid), all labelled with `attempt`.
  void expect_exactly_the_jobs_pods(const std::string& attempt) {
    const std::vector<json> all = server_.list_objects("v1", "pods", "default");
    ASSERT_EQ(all.size(), 2u) << server_.recent_requests_text();
    const std::string uid = job()["metadata"]["uid"];
    std::set<std::string> names;
    for (const json& p : all) {
      names.insert(p["metadata"]["name"].get<std::string>());
      EXPECT_FALSE(p["metadata"].contains("deletionTimestamp")) << p["metadata"].dump();
      EXPECT_EQ(p["metadata"]["labels"].value("qsync.dev/attempt", ""), attempt) << p["metadata"].dump();
      bool owned = false;
      for (const json& ref : p["metadata"].value("ownerReferences", json::array()))
        owned = owned || (ref.value("uid", "") == uid && ref.value("controller", false));
      EXPECT_TRUE(owned) << "orphaned pod: " << p["metadata"].dump();
    }
    EXPECT_EQ(names, (std::set<std::string>{"fm-worker-0", "fm-worker-1"}));
  }
  bool both_pods() { return pods().size() == 2; }
  // An operator crash at this point: nothing it still sends lands (every write refused, open
  // connections cut), then it stops; the faults are lifted for the next operator.
  void crash(std::unique_ptr<RunningOperator>& op) {
    server_.fail_next({"write", "", 503, 1000000, "the operator crashed"});
    server_.drop_connections();
    op.reset();
    server_.clear_faults();
    server_.set_response_delay(std::chrono::milliseconds(0));
  }
};

TEST_F(JobControllerFaultsTest, ConflictStormOnEveryWriteStillCreatesEachPodOnce) {
  create_job();
  // 10 in a row: the controller's per-item backoff (5 ms doubling, as client-go's) adds up to ~5 s.
  server_.fail_next({"write", "", 409, 10, "injected conflict storm"});
  RunningOperator op(*client_);
  ASSERT_TRUE(eventually([&] { return both_pods() && status().phase == "Pending"; }, 60s))
      << status().phase << "\n" << server_.recent_requests_text();
  EXPECT_EQ(server_.get_object("v1", "configmaps", "default", "fm-plan").is_null(), false);
  std::this_thread::sleep_for(1s);  // more reconciles: nothing more is created
  expect_exactly_the_jobs_pods("0");
  EXPECT_EQ(status().restarts, 0);
}

TEST_F(JobControllerFaultsTest, WatchDisconnectsAndExpiredHistoryLoseNoPhaseChange) {
  create_job();
  RunningOperator op(*client_);
  ASSERT_TRUE(eventually([&] { return both_pods(); })) << server_.recent_requests_text();
  set_phase(0, "Running");
  server_.close_watches();
  set_phase(1, "Running");
  server_.drop_connections();
  server_.compact_history();  // the informers' re-watch answers 410: they must list again
  ASSERT_TRUE(eventually([&] { return status().phase == "Running"; })) << status().phase;
  set_phase(1, "Failed", 137);
  server_.drop_connections();
  server_.compact_history();
  ASSERT_TRUE(eventually([&] { return status().restarts == 1 && both_pods() && pods()[0]["metadata"]["labels"].value("qsync.dev/attempt", "") == "1"; }))
      << status().phase << " restarts " << status().restarts;
  std::this_thread::sleep_for(1s);
  expect_exactly_the_jobs_pods("1");
  EXPECT_EQ(status().restarts, 1) << "one failure counted once";
}

TEST_F(JobControllerFaultsTest, OperatorRestartedWhilePlanningCreatesEachPodOnce) {
  create_job();
  server_.set_response_delay(100ms);  // each API call slow: the crash lands mid-reconcile
  auto first = std::make_unique<RunningOperator>(*client_);
  ASSERT_TRUE(eventually([&] { return !server_.get_object("v1", "configmaps", "default", "fm-plan").is_null(); }));
  crash(first);  // planned, the plan stored, pods not yet made
  EXPECT_LT(pods().size(), 2u) << "the window closed: the first operator finished before its crash";
  RunningOperator second(*client_);
  ASSERT_TRUE(eventually([&] { return both_pods() && status().phase == "Pending"; })) << status().phase;
  std::this_thread::sleep_for(1s);
  expect_exactly_the_jobs_pods("0");
}

TEST_F(JobControllerFaultsTest, OperatorRestartedBetweenPodCreationsKeepsTheFirstPod) {
  create_job();
  server_.set_response_delay(100ms);
  auto first = std::make_unique<RunningOperator>(*client_);
  ASSERT_TRUE(eventually([&] { return !pods().empty(); })) << server_.recent_requests_text();
  crash(first);
  ASSERT_FALSE(pods().empty());
  const std::string first_uid = pods()[0]["metadata"]["uid"];
  RunningOperator second(*client_);
  ASSERT_TRUE(eventually([&] { return both_pods(); }));
  std::this_thread::sleep_for(1s);
  expect_exactly_the_jobs_pods("0");
  bool kept = false;
  for (const json& p : pods()) kept = kept || p["metadata"]["uid"] == first_uid;
  EXPECT_TRUE(kept) << "the pod the first operator made was replaced";
}

TEST_F(JobControllerFaultsTest, OperatorRestartedDuringAJobRestartCountsItOnce) {
  create_job();
  auto first = std::make_unique<RunningOperator>(*client_);
  ASSERT_TRUE(eventually([&] { return both_pods(); }));
  set_phase(0, "Running");
  set_phase(1, "Running");
  ASSERT_TRUE(eventually([&] { return status().phase == "Running"; })) << status().phase;
  server_.set_response_delay(100ms);
  set_phase(1, "Failed", 137);
  ASSERT_TRUE(eventually([&] { return status().restarts == 1; })) << status().phase;
  crash(first);  // while the old attempt's pods go and the new attempt's are made
  RunningOperator second(*client_);
  ASSERT_TRUE(eventually([&] {
    const std::vector<json> p = pods();
    return p.size() == 2 && p[0]["metadata"]["labels"].value("qsync.dev/attempt", "") == "1" &&
           p[1]["metadata"]["labels"].value("qsync.dev/attempt", "") == "1";
  })) << server_.recent_requests_text();
  std::this_thread::sleep_for(1s);
  expect_exactly_the_jobs_pods("1");
  EXPECT_EQ(status().restarts, 1) << "the restart was counted again by the new operator";
}

}  // namespace
}  // namespace qsync::reconciler
