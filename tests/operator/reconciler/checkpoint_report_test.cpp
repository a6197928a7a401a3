// File: tests/operator/reconciler/checkpoint_report_test.cpp
// status.lastCheckpointStep from the workers' termination messages: parsing one message (a crash's
// log tail and other non-reports are ignored), the highest step over a pod's state and lastState,
// the per-job record of pods already gone, and the reconciler deriving the status from live pods
// and that record without ever lowering it (against the in-process API test server, no kubelet:
// the tests write the pods' terminated states themselves).
#include <gtest/gtest.h>

#include <prometheus/registry.h>

#include "operator/api/crd_schema.h"
#include "operator/api/hybrid_training_job.h"
#include "operator/reconciler/checkpoint_report.h"
#include "operator/reconciler/job_reconciler.h"
#include "tests/operator/api_server_fixture.h"
#include "tests/operator/cluster_objects.h"

namespace qsync::reconciler {
namespace {

using json = nlohmann::json;

json terminated(const std::string& message, int exit_code = 0) {
  return {{"terminated", {{"exitCode", exit_code}, {"message", message}}}};
}

json owned_pod(const std::string& owner_uid, const json& container_statuses) {
  return {{"metadata",
           {{"name", "fm-worker-0"},
            {"namespace", "default"},
            {"ownerReferences", json::array({{{"apiVersion", "qsync.dev/v1alpha1"}, {"kind", "HybridTrainingJob"},
                                              {"name", "fm"}, {"uid", owner_uid}, {"controller", true}}})}}},
          {"status", {{"phase", "Succeeded"}, {"containerStatuses", container_statuses}}}};
}

TEST(CheckpointReport, ReadsTheStepOfAWorkerReportOnly) {
  EXPECT_EQ(checkpoint_step_of_message(R"({"steps": 120, "checkpointStep": 100, "stoppedEarly": true})"), 100);
  EXPECT_EQ(checkpoint_step_of_message("{\"steps\": 7, \"checkpointStep\": 0, \"stoppedEarly\": false}\n"), 0);
  EXPECT_EQ(checkpoint_step_of_message(R"({"steps": 120})"), -1);                   // no step
  EXPECT_EQ(checkpoint_step_of_message(R"({"checkpointStep": "100"})"), -1);         // not a number
  EXPECT_EQ(checkpoint_step_of_message(R"({"checkpointStep": 12.5})"), -1);          // not an integer
  EXPECT_EQ(checkpoint_step_of_message(R"({"checkpointStep": -3})"), -1);            // not a step
  EXPECT_EQ(checkpoint_step_of_message("[100]"), -1);
  EXPECT_EQ(checkpoint_step_of_message("qsync-worker: error: --batch must be positive\nAborted"), -1);  // a log tail
  EXPECT_EQ(checkpoint_step_of_message(""), -1);
}

TEST(CheckpointReport, HighestStepOverStateAndLastState) {
  json statuses = json::array({{{"name", "worker"},
                                {"state", terminated(R"({"checkpointStep": 40})")},
                                {"lastState", terminated(R"({"checkpointStep": 90})", 1)}},
                               {{"name", "sidecar"}, {"state", terminated("not json", 2)}}});
  EXPECT_EQ(reported_checkpoint_step(owned_pod("u", statuses)), 90);
  statuses[0]["lastState"] = terminated("Traceback: out of memory", 137);
  EXPECT_EQ(reported_checkpoint_step(owned_pod("u", statuses)), 40);
  statuses[0]["state"] = {{"running", {{"startedAt", "2024-01-01T00:00:00Z"}}}};
  EXPECT_EQ(reported_checkpoint_step(owned_pod("u", statuses)), 0);
  EXPECT_EQ(reported_checkpoint_step({{"metadata", {{"name", "pending"}}}}), 0);  // no status yet
}

TEST(CheckpointReport, RecordKeepsTheHighestStepPerOwningJob) {
  ReportedCheckpoints record;
  record.observe(owned_pod("job-a", json::array({{{"state", terminated(R"({"checkpointStep": 50})")}}})));
  record.observe(owned_pod("job-a", json::array({{{"state", terminated(R"({"checkpointStep": 30})")}}})));
  record.observe(owned_pod("job-b", json::array({{{"state", terminated(R"({"checkpointStep": 8})")}}})));
  json orphan = owned_pod("job-c", json::array({{{"state", terminated(R"({"checkpointStep": 9})")}}}));
  orphan["metadata"].erase("ownerReferences");
  record.observe(orphan);
  EXPECT_EQ(record.step_for("job-a"), 50);
  EXPECT_EQ(record.step_for("job-b"), 8);
  EXPECT_EQ(record.step_for("job-c"), 0);
  record.forget("job-a");
  EXPECT_EQ(record.step_for("job-a"), 0);
  EXPECT_EQ(record.step_for("job-b"), 8);
}

class CheckpointStepReconcileTest : public operator_test::ApiServerTest {
 protected:
  CheckpointStepReconcileTest() {
    server_.put_object(api::hybrid_training_job_crd());
    server_.put_object(operator_test::ready_node(
        "train-1", {{"qsync.dev/pool", "training"}, {"nvidia.com/gpu.product", "NVIDIA-A100-SXM4-80GB"}}, {{"memory", "16Gi"}}));
    server_.put_object(operator_test::ready_node(
        "infer-1", {{"qsync.dev/pool", "inference"}, {"nvidia.com/gpu.product", "Tesla-T4"}}, {{"memory", "16Gi"}}));
    reader_ = std::make_unique<ApiClusterReader>(*client_);
    metrics_ = std::make_unique<JobMetrics>(registry_);
    ReconcilerOptions options;
    options.children.master_port = 29612;
    options.reported_checkpoints = &record_;
    reconciler_ = std::make_unique<JobReconciler>(*client_, *reader_, nullptr, metrics_.get(), options);
    json spec = operator_test::two_pool_job_spec("cnn", "training", "inference");
    spec["runPolicy"] = {{"backoffLimit", 2}};
    job_uid_ = client_->create(hybrid_training_jobs_type(), "default", operator_test::hybrid_training_job("fm", spec))
                   ["metadata"]["uid"].get<std::string>();
  }

  void reconcile() { reconciler_->reconcile("default/fm"); }
  int64_t last_checkpoint_step() {
    const json j = server_.get_object("qsync.dev/v1alpha1", "hybridtrainingjobs", "default", "fm");
    return api::hybrid_training_job_status_from_json(j["status"]).last_checkpoint_step;
  }
  std::string phase() {
    return server_.get_object("qsync.dev/v1alpha1", "hybridtrainingjobs", "default", "fm")["status"].value("phase", "");
  }
  json pod(int rank) { return server_.get_object("v1", "pods", "default", "fm-worker-" + std::to_string(rank)); }
  // The pod of `rank` in `phase`, its worker container terminated with `message` (or running).
  void set_pod(int rank, const std::string& phase, const std::string& message = "", int exit_code = 0) {
    json p = pod(rank);
    ASSERT_FALSE(p.is_null()) << "no pod for rank " << rank;
    json state = phase == "Running" ? json{{"running", json::object()}} : terminated(message, exit_code);
    p["status"] = {{"phase", phase}, {"containerStatuses", json::array({{{"name", "worker"}, {"state", state}}})}};
    server_.put_object(p);
  }

  prometheus::Registry registry_;
  ReportedCheckpoints record_;
  std::unique_ptr<ApiClusterReader> reader_;
  std::unique_ptr<JobMetrics> metrics_;
  std::unique_ptr<JobReconciler> reconciler_;
  std::string job_uid_;
};

TEST_F(CheckpointStepReconcileTest, FromTheWorkersMessagesAndNeverLowered) {
  reconcile();
  ASSERT_FALSE(pod(1).is_null());
  EXPECT_EQ(last_checkpoint_step(), 0);
  // Rank 0 crashed after its checkpoint at 60: the whole job restarts and the step is kept.
  set_pod(0, "Failed", R"({"steps": 64, "checkpointStep": 60, "stoppedEarly": false, "error": "peer lost"})", 1);
  set_pod(1, "Running");
  reconcile();
  EXPECT_EQ(phase(), "Restarting");
  EXPECT_EQ(last_checkpoint_step(), 60);
  reconcile();  // the old attempt's pods are gone (no kubelet: at once); attempt 1's are created
  ASSERT_EQ(pod(0)["metadata"]["labels"]["qsync.dev/attempt"], "1");
  // Attempt 1: a log tail and a lower step (a rank that only resumed) change nothing.
  set_pod(0, "Running");
  set_pod(1, "Failed", "Segmentation fault\n", 139);
  json p0 = pod(0);
  p0["status"]["containerStatuses"][0]["lastState"] = terminated(R"({"checkpointStep": 20})");
  server_.put_object(p0);
  reconcile();
  EXPECT_EQ(last_checkpoint_step(), 60);
  reconcile();  // attempt 2
  set_pod(0, "Succeeded", R"({"steps": 300, "checkpointStep": 300, "stoppedEarly": false})");
  set_pod(1, "Succeeded", R"({"steps": 300, "checkpointStep": 60, "stoppedEarly": false})");
  reconcile();
  EXPECT_EQ(phase(), "Succeeded");
  EXPECT_EQ(last_checkpoint_step(), 300);
}

TEST_F(CheckpointStepReconcileTest, SuspendedJobTakesTheStepOfPodsAlreadyGone) {
  reconcile();
  set_pod(0, "Running");
  set_pod(1, "Running");
  reconcile();
  client_->patch_merge(hybrid_training_jobs_type(), "default", "fm", {{"spec", {{"runPolicy", {{"suspend", true}}}}}});
  reconcile();
  EXPECT_EQ(phase(), "Suspended");
  EXPECT_EQ(last_checkpoint_step(), 0);
  // What the pod informer saw last of rank 0 before its object went: its SIGTERM checkpoint.
  json gone = owned_pod(job_uid_, json::array({{{"state", terminated(R"({"steps": 45, "checkpointStep": 45, "stoppedEarly": true})")}}}));
  record_.observe(gone);
  reconcile();
  EXPECT_EQ(phase(), "Suspended");
  EXPECT_EQ(last_checkpoint_step(), 45);
  record_.forget(job_uid_);  // the status keeps it
  reconcile();
  EXPECT_EQ(last_checkpoint_step(), 45);
}

TEST_F(CheckpointStepReconcileTest, DeletedPodsExitIsNotTheJobsOutcome) {
  reconcile();
  set_pod(0, "Running");
  set_pod(1, "Running");
  reconcile();
  // Rank 1 was deleted: its kubelet wrote its final status (a clean stop after SIGTERM) and the
  // object is still Terminating. That is no success: the job waits for it to go.
  set_pod(0, "Succeeded", R"({"steps": 45, "checkpointStep": 45, "stoppedEarly": true})");
  set_pod(1, "Succeeded", R"({"steps": 45, "checkpointStep": 0, "stoppedEarly": true})");
  json p1 = pod(1);
  p1["metadata"]["finalizers"] = json::array({"test.qsync.dev/hold"});  // keeps it Terminating
  server_.put_object(p1);
  client_->remove(kube::pods_type(), "default", "fm-worker-1");
  ASSERT_TRUE(pod(1)["metadata"].contains("deletionTimestamp")) << pod(1).dump();
  reconcile();
  EXPECT_NE(phase(), "Succeeded");
  EXPECT_EQ(last_checkpoint_step(), 45);
}

}  // namespace
}  // namespace qsync::reconciler
