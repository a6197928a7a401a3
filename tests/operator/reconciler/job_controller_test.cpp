// File: tests/operator/reconciler/job_controller_test.cpp
// The reconciler wired into a Manager as qsync-operator runs it (informers, owned-object
// watches, the phase gauge), against the in-process Kubernetes API test server: a job gets its
// pods from the informer-driven controller, pod phase changes reach the job's status through
// the owned-Pod watch, and a second manager (an operator restart) creates no duplicates; the
// informers cache only the operator's children and planning's labelled ConfigMaps, and GPU
// accounting lists every active pod.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <set>
#include <thread>

#include "operator/api/crd_schema.h"
#include "operator/api/hybrid_training_job_status.h"
#include "operator/reconciler/comm_profiles.h"
#include "operator/reconciler/desired_children.h"
#include "operator/reconciler/job_controller_setup.h"
#include "operator/reconciler/job_planning.h"
#include "tests/operator/api_server_fixture.h"
#include "tests/operator/cluster_objects.h"
#include "tests/operator/wait_until.h"

namespace qsync::reconciler {
namespace {

using json = nlohmann::json;

using operator_test::ready_node;

// Polls `done` every 50 ms for up to 20 s (generous: the machine is shared).
bool eventually(const std::function<bool()>& done) {
  return operator_test::wait_until(done, std::chrono::seconds(20), std::chrono::milliseconds(50));
}

// A manager with the job controller, running on its own thread until destroyed.
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
  controller::Manager& manager() { return manager_; }
  ClusterReader& reader() { return *parts_.reader; }

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

class JobControllerTest : public operator_test::ApiServerTest {
 protected:
  JobControllerTest() {
    server_.put_object(api::hybrid_training_job_crd());
    server_.put_object(ready_node("train-1", {{"qsync.dev/pool", "training"}, {"nvidia.com/gpu.product", "NVIDIA-L4"}}));
    server_.put_object(ready_node("infer-1", {{"qsync.dev/pool", "inference"}, {"nvidia.com/gpu.product", "Tesla-T4"}}));
  }

  void create_job() {
    client_->create(hybrid_training_jobs_type(), "default",
                    operator_test::hybrid_training_job("fm", operator_test::two_pool_job_spec("cnn", "training", "inference")));
  }
  std::vector<json> pods() { return server_.list_objects("v1", "pods", "default"); }
  std::string phase() {
    const json j = server_.get_object("qsync.dev/v1alpha1", "hybridtrainingjobs", "default", "fm");
    return j.contains("status") ? j["status"].value("phase", "") : "";
  }
  void set_running(int rank) {
    json p = server_.get_object("v1", "pods", "default", "fm-worker-" + std::to_string(rank));
    p["status"] = {{"phase", "Running"}};
    server_.put_object(p);
  }
};

TEST_F(JobControllerTest, ManagerRunsTheJobAndARestartMakesNoDuplicates) {
  std::vector<std::string> uids;
  {
    RunningOperator op(*client_);
    create_job();
    ASSERT_TRUE(eventually([&] { return pods().size() == 2 && phase() == "Pending"; })) << server_.recent_requests_text();
    set_running(0);
    set_running(1);
    ASSERT_TRUE(eventually([&] { return phase() == "Running"; })) << phase();
    const std::string scrape = op.manager().metrics().scrape();
    EXPECT_NE(scrape.find("qsync_operator_jobs_created_total 1"), std::string::npos) << scrape;
    EXPECT_TRUE(eventually([&] {
      return op.manager().metrics().scrape().find("qsync_operator_jobs{phase=\"Running\"} 1") != std::string::npos;
    }));
    for (const json& p : pods()) uids.push_back(p["metadata"]["uid"]);
  }
  RunningOperator restarted(*client_);
  std::this_thread::sleep_for(std::chrono::seconds(1));  // several reconciles (requeue every 300 ms)
  ASSERT_EQ(pods().size(), 2u);
  for (const json& p : pods()) EXPECT_NE(std::find(uids.begin(), uids.end(), p["metadata"]["uid"]), uids.end());
  EXPECT_EQ(phase(), "Running");
}

std::set<std::string> names(const std::vector<json>& objects) {
  std::set<std::string> out;
  for (const json& o : objects) out.insert(o["metadata"].value("namespace", "") + "/" + o["metadata"].value("name", ""));
  return out;
}

json object(const std::string& kind, const std::string& ns, const std::string& name, const json& labels,
            const std::string& phase = "") {
  json o = {{"apiVersion", "v1"}, {"kind", kind}, {"metadata", {{"name", name}, {"namespace", ns}, {"labels", labels}}}};
  if (kind == "Pod") {
    o["spec"] = {{"nodeName", "train-1"}, {"containers", json::array({{{"name", "c"}, {"image", "c:1"}}})}};
    o["status"] = {{"phase", phase}};
  }
  if (kind == "ConfigMap") o["data"] = {{"k", "v"}};
  return o;
}

TEST_F(JobControllerTest, InformersHoldOnlyOwnedObjectsAndLabelledInputs) {
  server_.put_object(object("Namespace", "", "team-b", json::object()));
  server_.put_object(object("Pod", "team-b", "serving", json::object(), "Running"));
  server_.put_object(object("Pod", "team-b", "batch-done", json::object(), "Succeeded"));
  server_.put_object(object("ConfigMap", "default", "unrelated", json::object()));
  // In another namespace, so that planning in "default" never reads them.
  server_.put_object(object("ConfigMap", "team-b", "profile", {{PROFILE_LABEL, "true"}}));
  server_.put_object(object("ConfigMap", "team-b", "calibration", {{CALIBRATION_LABEL, "true"}}));
  server_.put_object(object("ConfigMap", "team-b", "comm", {{COMM_PROFILE_LABEL, "true"}}));
  RunningOperator op(*client_);
  create_job();
  ASSERT_TRUE(eventually([&] { return pods().size() == 2; })) << server_.recent_requests_text();
  controller::Manager& m = op.manager();
  const std::string owned = JOB_LABEL;
  ASSERT_TRUE(eventually([&] { return m.informer_for(kube::pods_type(), "", owned).list().size() == 2; }));
  EXPECT_EQ(names(m.informer_for(kube::pods_type(), "", owned).list()),
            (std::set<std::string>{"default/fm-worker-0", "default/fm-worker-1"}));
  EXPECT_EQ(names(m.informer_for(kube::config_maps_type(), "", owned).list()), (std::set<std::string>{"default/fm-plan"}));
  EXPECT_EQ(names(m.informer_for(kube::config_maps_type(), "", PROFILE_LABEL).list()), (std::set<std::string>{"team-b/profile"}));
  EXPECT_EQ(names(m.informer_for(kube::config_maps_type(), "", CALIBRATION_LABEL).list()),
            (std::set<std::string>{"team-b/calibration"}));
  EXPECT_EQ(names(m.informer_for(kube::config_maps_type(), "", COMM_PROFILE_LABEL).list()), (std::set<std::string>{"team-b/comm"}));
  EXPECT_EQ(names(op.reader().config_maps("team-b")),
            (std::set<std::string>{"team-b/profile", "team-b/calibration", "team-b/comm"}));
  EXPECT_EQ(names(op.reader().config_maps("default")), (std::set<std::string>{"default/fm-plan"}));  // not "unrelated"
  // GPU accounting: every active pod of the cluster, the finished one left out.
  EXPECT_EQ(names(op.reader().all_pods()),
            (std::set<std::string>{"default/fm-worker-0", "default/fm-worker-1", "team-b/serving"}));
}

}  // namespace
}  // namespace qsync::reconciler
