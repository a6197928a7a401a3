// File: tests/operator/reconciler/job_reconciler_test.cpp
// The reconciler against the in-process Kubernetes API test server (no kubelet: the tests set
// Pod phases themselves): deterministic children, idempotence (no writes when nothing changed),
// whole-job restarts up to backoffLimit, success with cleanPodPolicy and TTL, suspend/resume,
// deadlines, invalid specs, child-creation failures in the status, waiting for a profile, a
// restart that waits for the old attempt's terminating pods, and a restarted operator that
// creates no duplicates.
#include <gtest/gtest.h>

#include <chrono>

#include <prometheus/registry.h>

#include "operator/api/crd_schema.h"
#include "operator/api/hybrid_training_job.h"
#include "operator/reconciler/job_reconciler.h"
#include "tests/operator/api_server_fixture.h"
#include "tests/operator/cluster_objects.h"

namespace qsync::reconciler {
namespace {

using json = nlohmann::json;

json ready_node(const std::string& name, const json& labels) {
  return operator_test::ready_node(name, labels, {{"memory", "16Gi"}});
}

class JobReconcilerTest : public operator_test::ApiServerTest {
 protected:
  JobReconcilerTest() : ApiServerTest(server_options()) {
    server_.put_object(api::hybrid_training_job_crd());
    server_.put_object(ready_node("train-1", {{"qsync.dev/pool", "training"}, {"nvidia.com/gpu.product", "NVIDIA-A100-SXM4-80GB"}}));
    server_.put_object(ready_node("infer-1", {{"qsync.dev/pool", "inference"}, {"nvidia.com/gpu.product", "Tesla-T4"}}));
    reader_ = std::make_unique<ApiClusterReader>(*client_);
    events_ = std::make_unique<kube::EventRecorder>(*client_, "qsync-operator");
    metrics_ = std::make_unique<JobMetrics>(registry_);
    reconciler_ = make_reconciler();
    clock_ = std::floor(std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());
  }

  static kube_test::ServerOptions server_options() {
    kube_test::ServerOptions o;
    o.request_log_size = 5000;
    return o;
  }

  std::unique_ptr<JobReconciler> make_reconciler() {
    ReconcilerOptions options;
    options.children.master_port = 29611;
    options.now_seconds = [this] { return clock_; };
    return std::make_unique<JobReconciler>(*client_, *reader_, events_.get(), metrics_.get(), options);
  }

  json create_job(json spec_patch = json::object(), const std::string& name = "fm") {
    json spec = operator_test::two_pool_job_spec("cnn", "training", "inference");
    spec["runPolicy"] = {{"backoffLimit", 2}};
    spec.merge_patch(spec_patch);
    return client_->create(hybrid_training_jobs_type(), "default", operator_test::hybrid_training_job(name, spec));
  }

  controller::ReconcileResult reconcile(const std::string& name = "fm") { return reconciler_->reconcile("default/" + name); }

  json job(const std::string& name = "fm") { return server_.get_object("qsync.dev/v1alpha1", "hybridtrainingjobs", "default", name); }
  api::HybridTrainingJobStatus status(const std::string& name = "fm") {
    const json j = job(name);
    return j.contains("status") ? api::hybrid_training_job_status_from_json(j["status"]) : api::HybridTrainingJobStatus{};
  }
  const api::Condition& condition(const api::HybridTrainingJobStatus& s, const char* type) {
    const api::Condition* c = api::find_condition(s.conditions, type);
    static const api::Condition absent{"absent", "absent", "", "", "", 0};
    return c != nullptr ? *c : absent;
  }
  std::vector<json> pods() { return server_.list_objects("v1", "pods", "default"); }
  json pod(int rank, const std::string& job = "fm") {
    return server_.get_object("v1", "pods", "default", job + "-worker-" + std::to_string(rank));
  }
  void set_phase(int rank, const std::string& phase, int exit_code = 0, const std::string& job = "fm") {
    json p = pod(rank, job);
    ASSERT_FALSE(p.is_null()) << "no pod for rank " << rank;
    p["status"] = {{"phase", phase}};
    if (phase == "Failed" || phase == "Succeeded")
      p["status"]["containerStatuses"] = json::array({{{"name", "worker"}, {"state", {{"terminated", {{"exitCode", exit_code}}}}}}});
    server_.put_object(p);
  }
  void patch_spec(json patch, const std::string& name = "fm") {
    client_->patch_merge(hybrid_training_jobs_type(), "default", name, {{"spec", patch}});
  }
  // Writes (anything but GET) outside Events since the log mark.
  size_t mark() { return server_.recent_requests().size(); }
  std::vector<std::string> writes_since(size_t mark) {
    std::vector<std::string> out;
    const std::vector<std::string> lines = server_.recent_requests();
    for (size_t i = mark; i < lines.size(); ++i)
      if (lines[i].rfind("GET", 0) != 0 && lines[i].find("/events") == std::string::npos) out.push_back(lines[i]);
    return out;
  }
  std::string event_messages() {
    std::string all;
    for (const json& e : server_.list_objects("v1", "events", "default")) all += e.value("reason", "") + ": " + e.value("message", "") + "\n";
    return all;
  }

  prometheus::Registry registry_;
  std::unique_ptr<ApiClusterReader> reader_;
  std::unique_ptr<kube::EventRecorder> events_;
  std::unique_ptr<JobMetrics> metrics_;
  std::unique_ptr<JobReconciler> reconciler_;
  double clock_ = 0;
};

TEST_F(JobReconcilerTest, MissingJobIsDone) {
  const controller::ReconcileResult r = reconcile("absent");
  EXPECT_FALSE(r.requeue);
  EXPECT_FALSE(r.requeue_after.has_value());
}

TEST_F(JobReconcilerTest, CreatesChildrenWithDeterministicNames) {
  create_job();
  const controller::ReconcileResult r = reconcile();
  EXPECT_TRUE(r.requeue_after.has_value());
  EXPECT_FALSE(server_.get_object("v1", "services", "default", "fm-workers").is_null());
  const json cm = server_.get_object("v1", "configmaps", "default", "fm-plan");
  ASSERT_FALSE(cm.is_null());
  EXPECT_TRUE(cm["data"].contains("rank-0.yaml"));
  EXPECT_TRUE(cm["data"].contains("rank-1.yaml"));
  EXPECT_EQ(cm["metadata"]["annotations"]["qsync.dev/generation"], "1");
  ASSERT_EQ(pods().size(), 2u);
  EXPECT_EQ(pod(0)["metadata"]["labels"]["qsync.dev/pool-kind"], "training");
  EXPECT_EQ(pod(1)["metadata"]["labels"]["qsync.dev/pool-kind"], "inference");
  EXPECT_EQ(pod(1)["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
                ["matchExpressions"][0]["values"][0],
            "infer-1");
  const api::HybridTrainingJobStatus s = status();
  EXPECT_EQ(s.phase, "Pending");
  EXPECT_EQ(condition(s, api::CONDITION_PLANNED).status, "True");
  EXPECT_EQ(condition(s, api::CONDITION_CREATED).status, "True");
  EXPECT_EQ(s.observed_generation, 1);
  ASSERT_TRUE(s.plan.has_value());
  EXPECT_EQ(s.plan->ranks.size(), 2u);
  EXPECT_EQ(s.replicas.total, 2);
  EXPECT_FALSE(s.start_time.empty());
  EXPECT_EQ(metrics_->created(), 1);
  EXPECT_NE(event_messages().find("CheckpointsNotPersistent"), std::string::npos) << event_messages();

  set_phase(0, "Running");
  set_phase(1, "Running");
  reconcile();
  const api::HybridTrainingJobStatus running = status();
  EXPECT_EQ(running.phase, "Running");
  EXPECT_EQ(condition(running, api::CONDITION_RUNNING).status, "True");
}

TEST_F(JobReconcilerTest, SecondReconcileWritesNothing) {
  create_job();
  reconcile();
  const size_t before = mark();
  reconcile();
  EXPECT_EQ(writes_since(before), std::vector<std::string>{});
  EXPECT_EQ(pods().size(), 2u);
  EXPECT_EQ(metrics_->created(), 1);
}

TEST_F(JobReconcilerTest, RestartedOperatorCreatesNoDuplicates) {
  create_job();
  reconcile();
  set_phase(0, "Running");
  reconcile();
  const std::string uid0 = pod(0)["metadata"]["uid"];
  reconciler_ = make_reconciler();  // a new operator process: nothing in memory
  const size_t before = mark();
  reconcile();
  EXPECT_EQ(writes_since(before), std::vector<std::string>{});
  EXPECT_EQ(pods().size(), 2u);
  EXPECT_EQ(pod(0)["metadata"]["uid"], uid0);
}

TEST_F(JobReconcilerTest, WorkerFailureRestartsTheWholeJobUntilBackoffLimit) {
  create_job({{"runPolicy", {{"backoffLimit", 1}}}});
  reconcile();
  set_phase(0, "Running");
  set_phase(1, "Running");
  reconcile();
  set_phase(1, "Failed", 3);
  reconcile();
  api::HybridTrainingJobStatus s = status();
  EXPECT_EQ(s.restarts, 1);
  EXPECT_EQ(s.phase, "Restarting");
  EXPECT_EQ(condition(s, api::CONDITION_RESTARTING).status, "True");
  EXPECT_EQ(condition(s, api::CONDITION_RUNNING).status, "False");
  EXPECT_TRUE(pods().empty());  // the whole job stops, not just the failed rank
  EXPECT_NE(event_messages().find("Restarting: rank 1 failed (exit code 3: a collective failed, usually because another rank was lost); "
                                   "restart 1 of 1 from the last checkpoint"),
            std::string::npos)
      << event_messages();
  EXPECT_EQ(metrics_->restarts(), 1);
  EXPECT_EQ(metrics_->job_restarts("default", "fm"), 1);  // per job, for the dashboard's panel

  reconcile();
  ASSERT_EQ(pods().size(), 2u);
  EXPECT_EQ(pod(0)["metadata"]["labels"]["qsync.dev/attempt"], "1");
  EXPECT_EQ(server_.get_object("v1", "configmaps", "default", "fm-plan")["metadata"]["annotations"]["qsync.dev/attempt"], "1");
  set_phase(0, "Running");
  set_phase(1, "Running");
  reconcile();
  s = status();
  EXPECT_EQ(condition(s, api::CONDITION_RUNNING).status, "True");
  EXPECT_EQ(condition(s, api::CONDITION_RESTARTING).status, "False");

  set_phase(0, "Failed", 137);
  reconcile();
  s = status();
  EXPECT_EQ(s.phase, "Failed");
  EXPECT_EQ(condition(s, api::CONDITION_FAILED).reason, "BackoffLimitExceeded");
  EXPECT_NE(condition(s, api::CONDITION_FAILED).message.find("exit code 137"), std::string::npos);
  EXPECT_EQ(s.restarts, 1);
  EXPECT_EQ(metrics_->failed(), 1);
  // Finished is final: nothing is recreated, the failed pod stays (cleanPodPolicy Running), status stays.
  const size_t before = mark();
  reconcile();
  EXPECT_EQ(writes_since(before), std::vector<std::string>{});
  EXPECT_EQ(pods().size(), 1u);
}

// Rank 1 ran out of memory (137); rank 0 then lost it in the all-reduce and exited 3 (a failed
// collective). Both are Failed in the same pass: status names rank 1, the cause, not rank 0.
TEST_F(JobReconcilerTest, FailureNamesTheCauseNotTheRankThatLostAPeer) {
  create_job({{"runPolicy", {{"backoffLimit", 0}}}});
  reconcile();
  set_phase(0, "Running");
  set_phase(1, "Running");
  reconcile();
  set_phase(0, "Failed", 3);
  set_phase(1, "Failed", 137);
  reconcile();
  const api::HybridTrainingJobStatus s = status();
  EXPECT_EQ(s.phase, "Failed");
  const std::string message = condition(s, api::CONDITION_FAILED).message;
  EXPECT_EQ(message.find("rank 1 failed (exit code 137)"), 0u) << message;
}

TEST_F(JobReconcilerTest, RestartWaitsForTheOldAttemptsPodsToBeGone) {
  create_job();
  reconcile();
  set_phase(0, "Running");
  set_phase(1, "Running");
  reconcile();
  json held = pod(0);  // a finalizer keeps rank 0 Terminating, as a kubelet stopping its process would
  held["metadata"]["finalizers"] = json::array({"test.qsync.dev/hold"});
  server_.put_object(held);
  set_phase(1, "Failed", 137);
  reconcile();
  EXPECT_EQ(status().restarts, 1);
  ASSERT_EQ(pods().size(), 1u);
  EXPECT_TRUE(pod(0)["metadata"].contains("deletionTimestamp"));
  reconcile();  // rank 1's name is free, but the old rank 0 still runs: nothing of attempt 1 starts
  ASSERT_EQ(pods().size(), 1u);
  EXPECT_EQ(pod(0)["metadata"]["labels"]["qsync.dev/attempt"], "0");
  EXPECT_EQ(status().phase, "Restarting");

  client_->patch_merge(kube::pods_type(), "default", "fm-worker-0", {{"metadata", {{"finalizers", nullptr}}}});
  ASSERT_TRUE(pod(0).is_null());
  reconcile();
  ASSERT_EQ(pods().size(), 2u);
  EXPECT_EQ(pod(0)["metadata"]["labels"]["qsync.dev/attempt"], "1");
  EXPECT_EQ(pod(1)["metadata"]["labels"]["qsync.dev/attempt"], "1");
  EXPECT_EQ(status().restarts, 1);
}

TEST_F(JobReconcilerTest, DeletedWorkerPodRestartsTheJob) {
  create_job();
  reconcile();
  set_phase(0, "Running");
  set_phase(1, "Running");
  reconcile();
  client_->remove(kube::pods_type(), "default", "fm-worker-1");
  reconcile();
  const api::HybridTrainingJobStatus s = status();
  EXPECT_EQ(s.restarts, 1);
  EXPECT_NE(condition(s, api::CONDITION_RESTARTING).message.find("rank 1's pod was deleted"), std::string::npos);
}

TEST_F(JobReconcilerTest, SuccessCleansUpPerPolicyAndTtlDeletesTheJob) {
  create_job({{"runPolicy", {{"cleanPodPolicy", "All"}, {"ttlSecondsAfterFinished", 60}}}});
  reconcile();
  set_phase(0, "Succeeded");
  set_phase(1, "Running");
  reconcile();
  EXPECT_EQ(status().phase, "Pending");
  set_phase(1, "Succeeded");
  const controller::ReconcileResult r = reconcile();
  const api::HybridTrainingJobStatus s = status();
  EXPECT_EQ(s.phase, "Succeeded");
  EXPECT_EQ(condition(s, api::CONDITION_SUCCEEDED).status, "True");
  EXPECT_FALSE(s.completion_time.empty());
  EXPECT_EQ(s.replicas.succeeded, 2);
  EXPECT_TRUE(pods().empty());
  ASSERT_TRUE(r.requeue_after.has_value());
  EXPECT_GT(r.requeue_after->count(), 50000);
  EXPECT_LE(r.requeue_after->count(), 60000);
  EXPECT_EQ(metrics_->succeeded(), 1);
  clock_ += 61;
  reconcile();
  EXPECT_TRUE(job().is_null());
}

TEST_F(JobReconcilerTest, CleanPodPolicyRunningKeepsFinishedPods) {
  create_job({{"runPolicy", {{"cleanPodPolicy", "Running"}, {"activeDeadlineSeconds", 100}}}});
  reconcile();
  set_phase(0, "Running");
  set_phase(1, "Running");
  reconcile();
  clock_ += 101;
  reconcile();
  const api::HybridTrainingJobStatus s = status();
  EXPECT_EQ(condition(s, api::CONDITION_FAILED).reason, "DeadlineExceeded");
  EXPECT_TRUE(pods().empty());  // both were running

  create_job({{"runPolicy", {{"cleanPodPolicy", "Running"}}}}, "second");
  reconcile("second");
  set_phase(0, "Succeeded", 0, "second");
  set_phase(1, "Failed", 1, "second");
  patch_spec({{"runPolicy", {{"backoffLimit", 0}}}}, "second");
  reconcile("second");
  EXPECT_EQ(condition(status("second"), api::CONDITION_FAILED).reason, "BackoffLimitExceeded");
  EXPECT_EQ(server_.list_objects("v1", "pods", "default").size(), 2u);  // finished pods kept for their logs
}

TEST_F(JobReconcilerTest, SuspendStopsPodsAndResumeRecreatesThem) {
  create_job();
  reconcile();
  set_phase(0, "Running");
  set_phase(1, "Running");
  reconcile();
  patch_spec({{"runPolicy", {{"suspend", true}}}});
  reconcile();
  api::HybridTrainingJobStatus s = status();
  EXPECT_EQ(s.phase, "Suspended");
  EXPECT_EQ(condition(s, api::CONDITION_SUSPENDED).status, "True");
  EXPECT_EQ(condition(s, api::CONDITION_RUNNING).status, "False");
  EXPECT_TRUE(pods().empty());
  const size_t before = mark();
  reconcile();
  EXPECT_EQ(writes_since(before), std::vector<std::string>{});

  patch_spec({{"runPolicy", {{"suspend", false}}}});
  reconcile();
  s = status();
  EXPECT_EQ(condition(s, api::CONDITION_SUSPENDED).status, "False");
  EXPECT_EQ(condition(s, api::CONDITION_SUSPENDED).reason, "Resumed");
  EXPECT_EQ(s.restarts, 0);
  EXPECT_EQ(pods().size(), 2u);
  const std::vector<std::string> command = pod(0)["spec"]["containers"][0]["command"];
  EXPECT_NE(std::find(command.begin(), command.end(), "--resume"), command.end());
}

TEST_F(JobReconcilerTest, NoMatchingNodesFailsWithAMessage) {
  create_job({{"pool", {{"inference", json::array({{{"name", "infer"}, {"nodeSelector", {{"qsync.dev/pool", "nowhere"}}}, {"count", 1}}})}}}});
  reconcile();
  const api::HybridTrainingJobStatus s = status();
  EXPECT_EQ(s.phase, "Failed");
  EXPECT_EQ(condition(s, api::CONDITION_FAILED).reason, "NoMatchingNodes");
  EXPECT_NE(s.message.find("qsync.dev/pool: nowhere"), std::string::npos) << s.message;
  EXPECT_EQ(condition(s, api::CONDITION_PLANNED).status, "False");
  EXPECT_TRUE(pods().empty());
}

TEST_F(JobReconcilerTest, SpecTheSchemaCannotCheckFails) {
  // Both steps and epochs: the schema lets it through, the typed parser refuses it.
  create_job({{"epochs", 2}});
  reconcile();
  const api::HybridTrainingJobStatus s = status();
  EXPECT_EQ(condition(s, api::CONDITION_FAILED).reason, "InvalidSpec");
  EXPECT_NE(s.message.find("epochs"), std::string::npos) << s.message;
  EXPECT_TRUE(pods().empty());
}

TEST_F(JobReconcilerTest, ChildCreateFailureIsInTheStatus) {
  create_job();
  server_.fail_next({.verb = "create", .path_contains = "/pods", .code = 500, .remaining = 1, .message = "etcd is on fire"});
  const controller::ReconcileResult r = reconcile();
  EXPECT_TRUE(r.requeue);
  api::HybridTrainingJobStatus s = status();
  EXPECT_EQ(condition(s, api::CONDITION_CREATED).status, "False");
  EXPECT_EQ(condition(s, api::CONDITION_CREATED).reason, "CreateFailed");
  EXPECT_NE(condition(s, api::CONDITION_CREATED).message.find("etcd is on fire"), std::string::npos)
      << condition(s, api::CONDITION_CREATED).message;
  EXPECT_NE(event_messages().find("FailedCreatePod"), std::string::npos);
  reconcile();
  s = status();
  EXPECT_EQ(condition(s, api::CONDITION_CREATED).status, "True");
  EXPECT_EQ(pods().size(), 2u);
  EXPECT_EQ(metrics_->created(), 1);
}

TEST_F(JobReconcilerTest, MissingProfileWaitsInsteadOfFailing) {
  server_.put_object(ready_node("cpu-1", {{"qsync.dev/pool", "cpu"}, {"qsync.dev/device-class", "cpu-avx2"}}));
  create_job({{"pool", {{"inference", json::array({{{"name", "cpu"}, {"nodeSelector", {{"qsync.dev/pool", "cpu"}}}, {"count", 1}}})}}}});
  const controller::ReconcileResult r = reconcile();
  ASSERT_TRUE(r.requeue_after.has_value());
  const api::HybridTrainingJobStatus s = status();
  EXPECT_EQ(s.phase, "Planning");  // waits in planning for the profile
  EXPECT_EQ(condition(s, api::CONDITION_PLANNED).reason, "ProfileMissing");
  EXPECT_NE(condition(s, api::CONDITION_PLANNED).message.find("kubectl label configmap"), std::string::npos);
  EXPECT_FALSE(api::is_finished(s.conditions));
  EXPECT_TRUE(pods().empty());
}

TEST_F(JobReconcilerTest, OtherManagersJobsAreLeftAlone) {
  create_job({{"runPolicy", {{"managedBy", "kueue.x-k8s.io/multikueue"}}}});
  const size_t before = mark();
  reconcile();
  EXPECT_EQ(writes_since(before), std::vector<std::string>{});
  EXPECT_TRUE(pods().empty());
}

TEST_F(JobReconcilerTest, JobsByPhaseGauge) {
  metrics_->set_jobs_by_phase({{{"status", {{"phase", "Running"}}}}, {{"status", {{"phase", "Running"}}}}, json::object()});
  bool found_running = false;
  for (const auto& family : registry_.Collect())
    if (family.name == "qsync_operator_jobs")
      for (const auto& m : family.metric)
        if (m.label.size() == 1 && m.label[0].value == "Running") found_running = m.gauge.value == 2;
  EXPECT_TRUE(found_running);
}

}  // namespace
}  // namespace qsync::reconciler
