// File: tests/operator/reconciler/job_kueue_test.cpp
// The operator as a HybridTrainingJob's Kueue integration, against the in-process API test
// server with Kueue's Workload and ResourceFlavor CRDs and a fake Kueue that writes what Kueue's
// scheduler writes (status.admission, QuotaReserved and Admitted; Evicted on preemption): a
// queued job is suspended and owns a Workload with one pod set per entry; on admission it starts
// on the assigned flavor's nodes with the flavor's tolerations and reports PodsReady; preempted, it stops, gets its
// entries' own values back and releases its quota once its pods are gone; admitted again, it
// resumes, and when it succeeds its Workload is Finished. Pod sets edited before admission are
// rewritten in place; without Kueue's CRDs the job waits, saying what to install.
#include <set>

#include "operator/reconciler/kueue_workload.h"
#include "tests/operator/reconciler/shared_cluster_fixture.h"

namespace qsync::reconciler {
namespace {

const json SPOT_TAINT_TOLERATION = {{"key", "spot"}, {"operator", "Exists"}, {"effect", "NoSchedule"}};

class KueueJobTest : public SharedClusterTest {
 protected:
  virtual bool kueue_installed() const { return true; }
  void SetUp() override {
    if (kueue_installed()) {
      server_.put_object(operator_test::kueue_workload_crd());
      server_.put_object(operator_test::kueue_resource_flavor_crd());
    }
    for (const char* name : {"spot-1", "spot-2", "ondemand-1", "ondemand-2"})
      server_.put_object(gpu_node(name, {{"qsync.dev/pool", "training"},
                                         {"flavor", std::string(name).rfind("spot", 0) == 0 ? "spot" : "on-demand"}},
                                  1));
    server_.put_object(gpu_node("infer-1", {{"qsync.dev/pool", "inference"}, {"flavor", "inference"}}, 1));
    if (!kueue_installed()) return;
    server_.put_object(operator_test::resource_flavor("on-demand", {{"flavor", "on-demand"}}));
    server_.put_object(operator_test::resource_flavor("spot", {{"flavor", "spot"}}, json::array({SPOT_TAINT_TOLERATION})));
    server_.put_object(operator_test::resource_flavor("inference", {{"flavor", "inference"}}));
  }
  void create_queued_job(int64_t train_count = 2) {
    create_job({{"pool", {{"training", json::array({{{"name", "train"}, {"nodeSelector", {{"qsync.dev/pool", "training"}}},
                                                     {"count", train_count}}})}}}},
               {{"kueue.x-k8s.io/queue-name", "research"}});
  }
  std::vector<json> workloads() { return server_.list_objects("kueue.x-k8s.io/v1beta2", "workloads", "default"); }
  json workload() {
    const std::vector<json> all = workloads();
    return all.size() == 1 ? all[0] : json();
  }
  // What Kueue's scheduler writes when it admits the workload: train on `train_flavor`.
  void admit(const std::string& train_flavor) {
    json wl = workload();
    wl["status"]["admission"] = {
        {"clusterQueue", "gpu-cq"},
        {"podSetAssignments",
         json::array({{{"name", "train"}, {"count", 2}, {"flavors", {{"nvidia.com/gpu", train_flavor}, {"cpu", train_flavor}}}},
                      {{"name", "infer"}, {"count", 1}, {"flavors", {{"nvidia.com/gpu", "inference"}}}}})}};
    wl["status"]["conditions"] = json::array(
        {{{"type", "QuotaReserved"}, {"status", "True"}, {"reason", "QuotaReserved"}, {"message", "reserved in gpu-cq"}},
         {{"type", "Admitted"}, {"status", "True"}, {"reason", "Admitted"}, {"message", "The workload is admitted"}}});
    client_->update_status(kueue_workloads_type(), wl);
  }
  void preempt() {
    json wl = workload();
    wl["status"]["conditions"].push_back(
        {{"type", "Evicted"}, {"status", "True"}, {"reason", "Preempted"}, {"message", "preempted by a higher priority job"}});
    client_->update_status(kueue_workloads_type(), wl);
  }
  static std::string condition(const json& wl, const std::string& type) {
    for (const json& c : wl["status"].value("conditions", json::array()))
      if (c["type"] == type) return c.value("status", "") + "/" + c.value("reason", "");
    return "<absent>";
  }
  std::vector<json> train_pods() {
    std::vector<json> out;
    for (const json& p : pods())
      if (p["metadata"]["labels"]["qsync.dev/pool-kind"] == "training") out.push_back(p);
    return out;
  }
};

TEST_F(KueueJobTest, AdmittedPreemptedReadmittedAndFinished) {
  create_queued_job();
  reconcile();  // not yet admitted: the operator suspends it (Kueue's webhook would have)
  EXPECT_EQ(job()["spec"]["runPolicy"]["suspend"], true);
  EXPECT_TRUE(workloads().empty());
  reconcile();  // suspended, no pods: the Workload
  EXPECT_TRUE(pods().empty());
  const json wl = workload();
  ASSERT_TRUE(wl.is_object()) << workloads().size() << " workloads";
  EXPECT_EQ(wl["spec"]["queueName"], "research");
  EXPECT_EQ(wl["metadata"]["ownerReferences"][0]["uid"], job()["metadata"]["uid"]);
  EXPECT_EQ(wl["metadata"]["ownerReferences"][0]["controller"], true);
  EXPECT_EQ(wl["metadata"]["labels"]["kueue.x-k8s.io/job-uid"], job()["metadata"]["uid"]);
  ASSERT_EQ(wl["spec"]["podSets"].size(), 2u);
  const json& train = wl["spec"]["podSets"][0];
  EXPECT_EQ(train["name"], "train");
  EXPECT_EQ(train["count"], 2);
  EXPECT_EQ(train["template"]["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"], "1");
  EXPECT_EQ(train["template"]["spec"]["nodeSelector"]["qsync.dev/pool"], "training");  // Kueue matches flavors with it
  EXPECT_EQ(train["template"]["spec"]["tolerations"][0]["key"], "nvidia.com/gpu");
  EXPECT_EQ(wl["spec"]["podSets"][1]["name"], "infer");
  EXPECT_EQ(status().phase, "Suspended");
  EXPECT_NE(status().message.find("waiting for admission"), std::string::npos) << status().message;
  const std::string created_rv = wl["metadata"]["resourceVersion"];
  reconcile();  // nothing changed: the Workload is not written again
  EXPECT_EQ(workload()["metadata"]["resourceVersion"], created_rv);

  admit("on-demand");
  reconcile();  // the flavors into the entries, unsuspended
  const json admitted = job();
  EXPECT_EQ(admitted["spec"]["runPolicy"]["suspend"], false);
  EXPECT_EQ(admitted["spec"]["pool"]["training"][0]["podTemplate"]["nodeSelector"]["flavor"], "on-demand");
  EXPECT_EQ(admitted["spec"]["pool"]["inference"][0]["podTemplate"]["nodeSelector"]["flavor"], "inference");
  reconcile();
  ASSERT_EQ(train_pods().size(), 2u) << status().message;
  for (const json& p : train_pods()) {
    EXPECT_EQ(p["spec"]["nodeSelector"]["flavor"], "on-demand");
    EXPECT_EQ(hosts(p), json::array({"ondemand-1", "ondemand-2"}));  // Kueue's nodes, not one pinned host
  }
  EXPECT_EQ(pods().size(), 3u);
  EXPECT_EQ(workloads().size(), 1u);
  EXPECT_EQ(workload()["metadata"]["name"], wl["metadata"]["name"]);  // admitted, not replaced
  reconcile();  // admitted and running its (pending) pods: Kueue's waitForPodsReady is told they are not up yet
  EXPECT_EQ(condition(workload(), "PodsReady"), "False/WaitForStart");
  set_running();
  reconcile();
  EXPECT_EQ(status().phase, "Running");
  reconcile();
  EXPECT_EQ(condition(workload(), "PodsReady"), "True/Started");

  preempt();
  reconcile();  // suspended, the entries' own values back
  const json evicted = job();
  EXPECT_EQ(evicted["spec"]["runPolicy"]["suspend"], true);
  EXPECT_FALSE(evicted["spec"]["pool"]["training"][0].contains("podTemplate")) << evicted["spec"].dump();
  EXPECT_FALSE(evicted["metadata"].value("annotations", json::object()).contains("qsync.dev/kueue-original-pod-templates"));
  reconcile();  // the pods stop
  EXPECT_TRUE(pods().empty());
  reconcile();  // pods gone: the quota is released and Kueue requeues it
  const json released = workload();
  EXPECT_FALSE(released["status"].contains("admission")) << released["status"].dump();
  EXPECT_EQ(condition(released, "QuotaReserved"), "False/PendingEvaluation");
  EXPECT_EQ(condition(released, "Admitted"), "False/NoReservation");
  EXPECT_EQ(condition(released, "Requeued"), "True/Preempted");

  json requeued = workload();  // Kueue clears Evicted when it admits again, here on spot
  requeued["status"]["conditions"] = json::array();
  client_->update_status(kueue_workloads_type(), requeued);
  admit("spot");
  reconcile();
  const json again = job();
  EXPECT_EQ(again["spec"]["pool"]["training"][0]["podTemplate"]["nodeSelector"]["flavor"], "spot");
  EXPECT_EQ(again["spec"]["pool"]["training"][0]["podTemplate"]["tolerations"][0], SPOT_TAINT_TOLERATION);
  reconcile();
  reconcile();
  ASSERT_EQ(train_pods().size(), 2u) << status().message;
  for (const json& p : train_pods()) {
    EXPECT_EQ(p["spec"]["nodeSelector"]["flavor"], "spot");
    EXPECT_EQ(hosts(p), json::array({"spot-1", "spot-2"}));
    EXPECT_EQ(p["spec"]["tolerations"][1], SPOT_TAINT_TOLERATION);  // after --gpu-tolerations
  }

  for (json p : pods()) {
    p["status"] = {{"phase", "Succeeded"}};
    server_.put_object(p);
  }
  reconcile();
  EXPECT_EQ(condition_reason(api::CONDITION_SUCCEEDED), "JobSucceeded") << status().message;
  reconcile();  // the pass of the finished job (its status write queues it)
  EXPECT_EQ(condition(workload(), "Finished"), "True/Succeeded");
  const std::string finished_rv = workload()["metadata"]["resourceVersion"];
  reconcile();
  EXPECT_EQ(workload()["metadata"]["resourceVersion"], finished_rv);  // written once
}

TEST_F(KueueJobTest, PodSetsEditedBeforeAdmissionAreRewritten) {
  create_queued_job();
  reconcile();
  reconcile();
  ASSERT_EQ(workload()["spec"]["podSets"][0]["count"], 2);
  patch_spec({{"pool", {{"training", json::array({{{"name", "train"}, {"nodeSelector", {{"qsync.dev/pool", "training"}}},
                                                   {"count", 3}}})}}}});
  reconcile();
  ASSERT_EQ(workloads().size(), 1u);
  EXPECT_EQ(workload()["spec"]["podSets"][0]["count"], 3);
  EXPECT_TRUE(pods().empty());
}

TEST_F(KueueJobTest, AFlavorLabelTheEntryContradictsFailsTheJobAndFinishesTheWorkload) {
  create_job({{"pool", {{"training", json::array({{{"name", "train"}, {"nodeSelector", {{"qsync.dev/pool", "training"}}},
                                                   {"count", 2}, {"podTemplate", {{"nodeSelector", {{"flavor", "spot"}}}}}}})}}}},
             {{"kueue.x-k8s.io/queue-name", "research"}});
  reconcile();
  reconcile();
  admit("on-demand");
  reconcile();
  EXPECT_EQ(condition_reason(api::CONDITION_FAILED), "KueueAdmissionConflict");
  EXPECT_NE(status().message.find("flavor=\"spot\""), std::string::npos) << status().message;
  EXPECT_EQ(condition(workload(), "Finished"), "True/FailedToStart");
  EXPECT_TRUE(pods().empty());
}

class NoKueueJobTest : public KueueJobTest {
 protected:
  bool kueue_installed() const override { return false; }
};

TEST_F(NoKueueJobTest, TheJobWaitsNamingWhatToInstall) {
  create_queued_job();
  reconcile();
  reconcile();
  EXPECT_TRUE(pods().empty());
  EXPECT_EQ(status().phase, "Suspended");
  EXPECT_NE(status().message.find("Workload resource (kueue.x-k8s.io/v1beta2 workloads) is not installed"), std::string::npos)
      << status().message;
}

}  // namespace
}  // namespace qsync::reconciler
