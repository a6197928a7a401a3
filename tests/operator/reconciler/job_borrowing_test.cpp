// File: tests/operator/reconciler/job_borrowing_test.cpp
// The reconciler's off-peak borrowing against the in-process API test server with its
// Deployment controller and GPU scheduler on (no kubelet: the tests mark pods Running and Ready
// themselves), an injected clock and demand source: the job lends (scales the Deployment in,
// waits for its pods to go), grows onto the freed GPUs (a resize: a new attempt, resumed from
// the checkpoint), reclaims when demand returns (the GPUs back at once, the Deployment out, the
// time to Ready measured), shrinks; a restarted reconciler continues without duplicates; a
// closing window reclaims early; deleting the job gives the workload back (the finalizer);
// elastic jobs wait below minRanks and resume; bad windows and workloads not opted in say why.
#include <gtest/gtest.h>

#include <cmath>

#include <prometheus/registry.h>

#include "operator/api/crd_schema.h"
#include "operator/controller/finalizers.h"
#include "operator/reconciler/borrow_observation.h"
#include "operator/reconciler/job_reconciler.h"
#include "tests/operator/api_server_fixture.h"
#include "tests/operator/cluster_objects.h"

namespace qsync::reconciler {
namespace {

using json = nlohmann::json;

constexpr double T0 = 1781222400;  // 2026-06-12T00:00:00Z, a Friday

class FakeDemand : public lending::DemandSource {
 public:
  explicit FakeDemand(const double* clock) : clock_(clock) {}
  lending::DemandSample sample(const std::string& url, const std::string& query) override {
    last_url = url;
    last_query = query;
    return {ok, value, *clock_, ok ? "" : "connection refused"};
  }
  double value = 0;
  bool ok = true;
  std::string last_url, last_query;

 private:
  const double* clock_;
};

kube_test::ServerOptions with_controllers() {
  kube_test::ServerOptions o;
  o.controllers = true;
  o.request_log_size = 5000;
  return o;
}

json gpu_node(const std::string& name, const std::string& pool, const std::string& product, int gpus) {
  return operator_test::ready_node(name, {{"qsync.dev/pool", pool}, {"nvidia.com/gpu.product", product}},
                                   {{"memory", "16Gi"}, {"nvidia.com/gpu", std::to_string(gpus)}});
}

json chat_deployment(int replicas, bool lendable = true) {
  json d = {{"apiVersion", "apps/v1"},
            {"kind", "Deployment"},
            {"metadata", {{"name", "chat"}, {"namespace", "default"}}},
            {"spec",
             {{"replicas", replicas},
              {"selector", {{"matchLabels", {{"app", "chat"}}}}},
              {"template",
               {{"metadata", {{"labels", {{"app", "chat"}}}}},
                {"spec",
                 {{"nodeSelector", {{"qsync.dev/pool", "inference"}}},
                  {"containers",
                   json::array({{{"name", "serve"}, {"image", "chat:1"}, {"resources", {{"limits", {{"nvidia.com/gpu", 1}}}}}}})}}}}}}}};
  if (lendable) d["metadata"]["annotations"] = {{LENDABLE_ANNOTATION, "true"}};
  return d;
}

// One A100 training rank plus up to 3 borrowed T4 ranks, sized by requests per replica.
json borrowing_spec() {
  json spec = {{"model", {{"zoo", "char-gpt"}}},
               {"steps", 1000},
               {"globalBatch", 512},
               {"planning", {{"allocator", "greedy"}}},
               {"elasticPolicy", {{"minRanks", 1}, {"growCooldownSeconds", 0}, {"minGrowthPercent", 5}}},
               {"pool",
                {{"training", json::array({{{"name", "train"}, {"nodeSelector", {{"qsync.dev/pool", "training"}}}, {"count", 1}}})},
                 {"inference",
                  json::array({{{"name", "t4"},
                                {"nodeSelector", {{"qsync.dev/pool", "inference"}}},
                                {"count", 3},
                                {"gpusPerRank", 1},
                                {"borrow",
                                 {{"workload", {{"name", "chat"}}},
                                  {"minServingReplicas", 1},
                                  {"reclaimGraceSeconds", 60},
                                  {"lendCooldownSeconds", 0},
                                  {"demand",
                                   {{"prometheus", {{"query", "sum(rate(chat_requests_total[1m]))"}}},
                                    {"requestsPerReplica", 10},
                                    {"headroomPercent", 0}}}}}}})}}}};
  return spec;
}

class JobBorrowingTest : public operator_test::ApiServerTest {
 protected:
  JobBorrowingTest() : ApiServerTest(with_controllers()), demand_(&clock_) {
    server_.put_object(api::hybrid_training_job_crd());
    server_.put_object(gpu_node("train-1", "training", "NVIDIA-A100-SXM4-80GB", 1));
    server_.put_object(gpu_node("infer-1", "inference", "Tesla-T4", 4));
    reader_ = std::make_unique<ApiClusterReader>(*client_);
    events_ = std::make_unique<kube::EventRecorder>(*client_, "qsync-operator");
    metrics_ = std::make_unique<JobMetrics>(registry_);
    reconciler_ = make_reconciler();
  }

  std::unique_ptr<JobReconciler> make_reconciler() {
    ReconcilerOptions options;
    options.children.master_port = 29612;
    options.now_seconds = [this] { return clock_; };
    options.demand_source = &demand_;
    options.prometheus_url = "http://prometheus.test:9090";
    return std::make_unique<JobReconciler>(*client_, *reader_, events_.get(), metrics_.get(), options);
  }

  void create_job(const json& spec, const std::string& name = "fm") {
    client_->create(hybrid_training_jobs_type(), "default", operator_test::hybrid_training_job(name, spec));
  }
  controller::ReconcileResult reconcile(const std::string& name = "fm") { return reconciler_->reconcile("default/" + name); }
  json job(const std::string& name = "fm") { return server_.get_object("qsync.dev/v1alpha1", "hybridtrainingjobs", "default", name); }
  api::HybridTrainingJobStatus status(const std::string& name = "fm") {
    const json j = job(name);
    return j.contains("status") ? api::hybrid_training_job_status_from_json(j["status"]) : api::HybridTrainingJobStatus{};
  }
  json chat() { return server_.get_object("apps/v1", "deployments", "default", "chat"); }
  std::vector<json> pods_of(const std::string& label, const std::string& value) {
    std::vector<json> out;
    for (json& p : server_.list_objects("v1", "pods", "default"))
      if (p["metadata"].value("labels", json::object()).value(label, "") == value) out.push_back(std::move(p));
    return out;
  }
  std::vector<json> job_pods() { return pods_of("qsync.dev/job", "fm"); }
  std::vector<json> chat_pods() { return pods_of("app", "chat"); }
  void set_running(const json& pod, bool ready = true) {
    json p = pod;
    p["status"] = {{"phase", "Running"},
                   {"conditions", json::array({{{"type", "Ready"}, {"status", ready ? "True" : "False"}}})}};
    server_.put_object(p);
  }
  void all_running() {
    for (const json& p : job_pods()) set_running(p);
    for (const json& p : chat_pods())
      if (!p["spec"].value("nodeName", "").empty()) set_running(p);
  }
  std::string events() {
    std::string all;
    for (const json& e : server_.list_objects("v1", "events", "default"))
      all += e.value("reason", "") + ": " + e.value("message", "") + "\n";
    return all;
  }
  // Passes until nothing changes: the attempt's pods exist and run.
  void settle(int passes = 3) {
    for (int i = 0; i < passes; ++i) {
      reconcile();
      all_running();
    }
  }

  double clock_ = T0;
  FakeDemand demand_;
  prometheus::Registry registry_;
  std::unique_ptr<ApiClusterReader> reader_;
  std::unique_ptr<kube::EventRecorder> events_;
  std::unique_ptr<JobMetrics> metrics_;
  std::unique_ptr<JobReconciler> reconciler_;
};

TEST_F(JobBorrowingTest, LendsGrowsReclaimsAndShrinks) {
  server_.put_object(chat_deployment(3));
  for (const json& p : chat_pods()) set_running(p);
  demand_.value = 25;  // 3 replicas' worth: nothing to lend
  create_job(borrowing_spec());
  settle();
  EXPECT_EQ(job_pods().size(), 1u);
  EXPECT_EQ(chat()["spec"]["replicas"], 3);
  api::HybridTrainingJobStatus s = status();
  ASSERT_EQ(s.lending.size(), 1u);
  EXPECT_EQ(s.lending[0].state, lending::STATE_SERVING);
  EXPECT_EQ(s.lending[0].needed_replicas, 3);
  EXPECT_EQ(demand_.last_url, "http://prometheus.test:9090") << "the operator's --prometheus-url";
  EXPECT_EQ(demand_.last_query, "sum(rate(chat_requests_total[1m]))");
  EXPECT_TRUE(controller::has_finalizer(job(), RETURN_BORROWED_FINALIZER));

  // Demand falls to one replica's worth: scale in, wait for the pods, then grow onto their GPUs.
  demand_.value = 5;
  clock_ += 10;
  reconcile();
  EXPECT_EQ(chat()["spec"]["replicas"], 1);
  EXPECT_EQ(annotation_of(chat(), SERVING_REPLICAS_ANNOTATION), "3");
  EXPECT_EQ(annotation_of(chat(), LENT_TO_ANNOTATION), "fm");
  EXPECT_EQ(chat_pods().size(), 1u);
  EXPECT_EQ(job_pods().size(), 1u) << "GPUs are lent only once the pods are gone";
  EXPECT_NE(events().find("Lending: scaling Deployment/chat in from 3 to 1"), std::string::npos) << events();
  clock_ += 10;
  reconcile();  // the resize: the old attempt's pod goes
  s = status();
  EXPECT_EQ(s.resizes, 1);
  ASSERT_TRUE(s.last_resize.has_value());
  EXPECT_EQ(s.last_resize->reason, "PoolGrew");
  EXPECT_EQ(s.last_resize->to_ranks, 3);

  // The operator restarts in the middle of the resize: a new reconciler continues from the cluster.
  reconciler_ = make_reconciler();
  settle();
  std::vector<json> pods = job_pods();
  ASSERT_EQ(pods.size(), 3u);
  int on_infer = 0;
  for (const json& p : pods) {
    EXPECT_EQ(p["metadata"]["labels"]["qsync.dev/attempt"], "1");
    on_infer += p["spec"].value("nodeName", "") == "infer-1" ? 1 : 0;
  }
  EXPECT_EQ(on_infer, 2);
  s = status();
  EXPECT_EQ(s.phase, api::PHASE_RUNNING);
  EXPECT_EQ(s.resizes, 1) << "the restart did not resize again";
  EXPECT_EQ(s.borrowed_devices, 2);
  EXPECT_EQ(s.lending[0].state, lending::STATE_LENT);
  EXPECT_EQ(s.restarts, 0);
  EXPECT_DOUBLE_EQ(metrics_->borrowed_devices("default", "fm"), 2);

  // Demand returns: reclaim at once; the job shrinks, the Deployment scales out.
  demand_.value = 25;
  clock_ += 10;
  const double trigger = clock_;
  reconcile();
  EXPECT_EQ(chat()["spec"]["replicas"], 3);
  s = status();
  EXPECT_EQ(s.lending[0].state, lending::STATE_RECLAIMING);
  EXPECT_EQ(s.resizes, 2);
  EXPECT_EQ(s.last_resize->reason, "PoolShrank");
  EXPECT_NE(events().find("Reclaiming: reclaiming Deployment/chat (DemandHigh)"), std::string::npos) << events();
  clock_ += 7.5;
  settle();
  EXPECT_EQ(job_pods().size(), 1u);
  EXPECT_EQ(job_pods()[0]["metadata"]["labels"]["qsync.dev/attempt"], "2");
  EXPECT_EQ(chat_pods().size(), 3u);
  s = status();
  EXPECT_EQ(s.lending[0].state, lending::STATE_SERVING);
  EXPECT_EQ(s.lending[0].reclaims, 1);
  EXPECT_EQ(s.lending[0].reclaims_missed, 0);
  ASSERT_TRUE(s.lending[0].last_reclaim_seconds.has_value());
  EXPECT_NEAR(*s.lending[0].last_reclaim_seconds, clock_ - trigger - 0, 8.0);
  EXPECT_EQ(s.borrowed_devices, 0);
  EXPECT_EQ(annotation_of(chat(), SERVING_REPLICAS_ANNOTATION), "") << "nothing lent: the annotations go";
  EXPECT_NE(events().find("Reclaimed: Deployment/chat is back to 3 Ready replicas"), std::string::npos) << events();
  EXPECT_EQ(metrics_->reclaims("DemandHigh", true), 1);
  EXPECT_EQ(metrics_->resizes("PoolGrew"), 1);
  EXPECT_EQ(metrics_->resizes("PoolShrank"), 1);
  EXPECT_EQ(metrics_->reclaim_observations(), 1u);
}

TEST_F(JobBorrowingTest, WindowClosingReclaimsAndDeletionGivesTheWorkloadBack) {
  server_.put_object(chat_deployment(3));
  for (const json& p : chat_pods()) set_running(p);
  json spec = borrowing_spec();
  spec["pool"]["inference"][0]["borrow"].erase("demand");
  spec["pool"]["inference"][0]["borrow"]["windows"] = json::array({{{"start", "0 20 * * *"}, {"end", "0 7 * * *"}}});
  clock_ = T0 + 2 * 3600;  // 02:00, inside the window
  create_job(spec);
  settle(4);
  EXPECT_EQ(chat()["spec"]["replicas"], 1);
  EXPECT_EQ(status().borrowed_devices, 2);
  // 06:59:30: the window closes within reclaimGraceSeconds: the replicas come back now.
  clock_ = T0 + 7 * 3600 - 30;
  reconcile();
  EXPECT_EQ(chat()["spec"]["replicas"], 3);
  EXPECT_EQ(status().lending[0].reclaim_reason, "WindowClosing");
  // Back inside the next night, lent again; then the job is deleted: the workload gets its replicas.
  settle();
  clock_ = T0 + 22 * 3600;
  settle(4);
  EXPECT_EQ(chat()["spec"]["replicas"], 1);
  client_->remove(hybrid_training_jobs_type(), "default", "fm");
  EXPECT_FALSE(job().is_null()) << "the finalizer holds the job";
  reconcile();
  EXPECT_TRUE(job().is_null());
  EXPECT_EQ(chat()["spec"]["replicas"], 3);
  EXPECT_EQ(annotation_of(chat(), LENT_TO_ANNOTATION), "");
  EXPECT_NE(events().find("Returned: Deployment/chat gets its 3 serving replicas back: the job is being deleted"),
            std::string::npos)
      << events();
}

TEST_F(JobBorrowingTest, StaleDemandAndAFinishedJobGiveTheReplicasBack) {
  server_.put_object(chat_deployment(3));
  for (const json& p : chat_pods()) set_running(p);
  demand_.value = 5;
  create_job(borrowing_spec());
  settle(4);
  EXPECT_EQ(chat()["spec"]["replicas"], 1);
  demand_.ok = false;  // Prometheus is gone: reclaim
  clock_ += 10;
  reconcile();
  EXPECT_EQ(chat()["spec"]["replicas"], 3);
  EXPECT_EQ(status().lending[0].reason, "DemandUnknown");
  EXPECT_NE(status().lending[0].message.find("connection refused"), std::string::npos);
  // Lent again, then every rank succeeds: the job finishes and returns the replicas.
  demand_.ok = true;
  clock_ += 10;
  settle(7);  // the reclaim ends, the Deployment scales in, the job grows
  EXPECT_EQ(chat()["spec"]["replicas"], 1);
  ASSERT_EQ(status().phase, api::PHASE_RUNNING);
  EXPECT_EQ(status().borrowed_devices, 2);
  for (json p : job_pods()) {
    p["status"] = {{"phase", "Succeeded"}};
    server_.put_object(p);
  }
  reconcile();
  EXPECT_EQ(status().phase, api::PHASE_SUCCEEDED);
  EXPECT_EQ(chat()["spec"]["replicas"], 3);
  EXPECT_EQ(status().borrowed_devices, 0);
}

TEST_F(JobBorrowingTest, WorkloadNotOptedInLendsNothing) {
  server_.put_object(chat_deployment(3, false));
  demand_.value = 5;
  create_job(borrowing_spec());
  settle();
  EXPECT_EQ(chat()["spec"]["replicas"], 3);
  const api::HybridTrainingJobStatus s = status();
  EXPECT_EQ(s.lending[0].state, lending::STATE_UNAVAILABLE);
  EXPECT_EQ(s.lending[0].reason, "NotOptedIn");
  EXPECT_NE(s.lending[0].message.find("qsync.dev/lendable"), std::string::npos) << s.lending[0].message;
  EXPECT_EQ(job_pods().size(), 1u);
}

TEST_F(JobBorrowingTest, BadTimeZoneFailsTheJobNamingTheField) {
  json spec = borrowing_spec();
  spec["pool"]["inference"][0]["borrow"]["windows"] =
      json::array({{{"start", "0 20 * * *"}, {"end", "0 7 * * *"}, {"timeZone", "Mars/Olympus_Mons"}}});
  create_job(spec);
  reconcile();
  const api::HybridTrainingJobStatus s = status();
  EXPECT_EQ(s.phase, api::PHASE_FAILED);
  EXPECT_NE(s.message.find("spec.pool.inference[0].borrow.windows[0]"), std::string::npos) << s.message;
  EXPECT_NE(s.message.find("Mars/Olympus_Mons"), std::string::npos) << s.message;
}

TEST_F(JobBorrowingTest, ElasticJobWaitsBelowMinRanksAndResumes) {
  server_.put_object(gpu_node("train-2", "training", "NVIDIA-A100-SXM4-80GB", 1));
  json spec = borrowing_spec();
  spec["pool"].erase("inference");
  spec["pool"]["training"][0]["count"] = 2;
  spec["elasticPolicy"]["minRanks"] = 2;
  create_job(spec);
  settle();
  ASSERT_EQ(job_pods().size(), 2u);
  // A node is lost: fewer ranks than minRanks. The workers stop; the job waits.
  client_->remove(kube::nodes_type(), "", "train-2");
  clock_ += 10;
  reconcile();
  api::HybridTrainingJobStatus s = status();
  EXPECT_EQ(s.phase, api::PHASE_WAITING);
  EXPECT_NE(s.message.find("fewer than spec.elasticPolicy.minRanks 2"), std::string::npos) << s.message;
  EXPECT_EQ(api::find_condition(s.conditions, api::CONDITION_PLANNED)->reason, "BelowMinRanks");
  EXPECT_TRUE(job_pods().empty());
  EXPECT_EQ(s.resizes, 1);
  // It comes back: the job resumes at 2 ranks, a new attempt.
  server_.put_object(gpu_node("train-2", "training", "NVIDIA-A100-SXM4-80GB", 1));
  clock_ += 10;
  settle();
  ASSERT_EQ(job_pods().size(), 2u);
  for (const json& p : job_pods()) EXPECT_EQ(p["metadata"]["labels"]["qsync.dev/attempt"], "1");
  EXPECT_EQ(status().phase, api::PHASE_RUNNING);
  EXPECT_EQ(status().restarts, 0) << "waiting is not a failure";
}

}  // namespace
}  // namespace qsync::reconciler
