// File: tests/operator/reconciler/job_shared_cluster_test.cpp
// The reconciler on a shared cluster, against the in-process Kubernetes API test server (no
// kubelet: the tests set Pod phases): the pool (a tainted inference node, a training
// node with one GPU free of two) waits in Planning with the taint named, then runs once the
// inference entry tolerates it (Kueue admission: job_kueue_test.cpp); an edited count never mixes WORLD_SIZE values; startTime lost with a
// failed status write is taken from the pods, so activeDeadlineSeconds still fires; a
// gang-scheduled job's PodGroup exists with minMember = the world size before its first pod,
// follows an edited count before any pod of the new size, and goes when the gang is switched off;
// without the PodGroup CRD no pod is created and Created=False says what to install.
#include <gtest/gtest.h>

#include <set>

#include "tests/operator/reconciler/shared_cluster_fixture.h"

namespace qsync::reconciler {
namespace {

using json = nlohmann::json;

// The pool: the inference node is tainted, the training node has one GPU free of two.
TEST_F(SharedClusterTest, TaintedInferenceNodeAndOneFreeGpu) {
  server_.put_object(gpu_node("train-1", {{"qsync.dev/pool", "training"}}, 2));
  server_.put_object(gpu_node("infer-1", {{"qsync.dev/pool", "inference"}}, 1, json::array({INFERENCE_TAINT})));
  json other = {{"apiVersion", "v1"}, {"kind", "Pod"},
                {"metadata", {{"name", "someone-else"}, {"namespace", "default"}}},
                {"spec", {{"nodeName", "train-1"},
                          {"containers", json::array({{{"name", "c"}, {"image", "x"},
                                                       {"resources", {{"limits", {{"nvidia.com/gpu", "1"}}}}}}})}}},
                {"status", {{"phase", "Running"}}}};
  server_.put_object(other);
  create_job({{"pool", {{"training", json::array({{{"name", "train"}, {"nodeSelector", {{"qsync.dev/pool", "training"}}}, {"count", 2}}})}}}});

  reconcile();  // two training ranks do not fit one free GPU, and infer-1's taint is not tolerated
  EXPECT_EQ(status().phase, "Planning");
  EXPECT_TRUE(pods().empty());
  const std::string first = condition_reason(api::CONDITION_PLANNED);
  EXPECT_TRUE(first == "InsufficientCapacity" || first == "UntoleratedTaints") << first;

  patch_spec({{"pool", {{"training", json::array({{{"name", "train"}, {"nodeSelector", {{"qsync.dev/pool", "training"}}}, {"count", 1}}})}}}});
  reconcile();
  EXPECT_EQ(status().phase, "Planning");
  EXPECT_EQ(condition_reason(api::CONDITION_PLANNED), "UntoleratedTaints");
  EXPECT_NE(status().message.find("infer-1 (dedicated=inference:NoSchedule)"), std::string::npos) << status().message;

  const json toleration = {{"key", "dedicated"}, {"operator", "Equal"}, {"value", "inference"}, {"effect", "NoSchedule"}};
  patch_spec({{"pool", {{"inference", json::array({{{"name", "infer"},
                                                     {"nodeSelector", {{"qsync.dev/pool", "inference"}}},
                                                     {"podTemplate", {{"tolerations", json::array({toleration})}}}}})}}}});
  reconcile();
  ASSERT_EQ(pods().size(), 2u) << status().message;
  EXPECT_EQ(condition_reason(api::CONDITION_PLANNED), "PlanReady");
  for (const json& p : pods()) {
    const json& res = p["spec"]["containers"][0]["resources"];
    EXPECT_EQ(res["limits"]["nvidia.com/gpu"], "1");
    EXPECT_TRUE(res["requests"].contains("memory"));  // never BestEffort
    const json tolerations = p["spec"]["tolerations"];
    EXPECT_EQ(tolerations[0]["key"], "nvidia.com/gpu");  // --gpu-tolerations
    if (p["metadata"]["labels"]["qsync.dev/pool-kind"] == "inference") {
      EXPECT_EQ(hosts(p), json::array({"infer-1"}));
      ASSERT_EQ(tolerations.size(), 2u);
      EXPECT_EQ(tolerations[1], toleration);
    } else {
      EXPECT_EQ(hosts(p), json::array({"train-1"}));
      EXPECT_EQ(tolerations.size(), 1u);
    }
  }
}

TEST_F(SharedClusterTest, AnEditedCountRestartsEveryRankAtTheNewSize) {
  server_.put_object(gpu_node("train-1", {{"qsync.dev/pool", "training"}}, 4));
  server_.put_object(gpu_node("infer-1", {{"qsync.dev/pool", "inference"}}, 4));
  create_job(json::object());
  reconcile();
  ASSERT_EQ(pods().size(), 2u);
  set_running();
  reconcile();
  patch_spec({{"pool", {{"training", json::array({{{"name", "train"}, {"nodeSelector", {{"qsync.dev/pool", "training"}}}, {"count", 3}}})}}}});
  size_t seen_new = 0;
  for (int pass = 0; pass < 4; ++pass) {
    reconcile();
    std::set<std::string> sizes;
    for (const json& p : pods()) sizes.insert(env_of(p, "WORLD_SIZE"));
    EXPECT_LE(sizes.size(), 1u) << "mixed WORLD_SIZE after pass " << pass;
    if (sizes == std::set<std::string>{"4"}) seen_new = pods().size();
  }
  EXPECT_EQ(seen_new, 4u);
  bool replanned = false;
  for (const json& e : server_.list_objects("v1", "events", "default"))
    replanned = replanned || (e.value("reason", "") == "Replanned" && e.value("message", "").find("4 ranks") != std::string::npos);
  EXPECT_TRUE(replanned);
}

TEST_F(SharedClusterTest, StartTimeLostWithAStatusWriteComesFromThePods) {
  server_.put_object(gpu_node("train-1", {{"qsync.dev/pool", "training"}}, 1));
  server_.put_object(gpu_node("infer-1", {{"qsync.dev/pool", "inference"}}, 1));
  create_job({{"runPolicy", {{"activeDeadlineSeconds", 600}}}});
  reconcile();
  set_running("2026-01-01T00:00:00Z");
  json lost = job();  // the pass that created the pods failed to write its status
  lost["status"].erase("startTime");
  client_->update_status(hybrid_training_jobs_type(), lost);
  clock_ = kube::kube_time_parse("2026-01-01T00:11:00Z");
  reconcile();
  EXPECT_EQ(status().start_time, "2026-01-01T00:00:00Z");
  EXPECT_EQ(condition_reason(api::CONDITION_FAILED), "DeadlineExceeded");
}

json pod_group(kube_test::ApiServer& server) {
  return server.get_object("scheduling.x-k8s.io/v1alpha1", "podgroups", "default", "fm");
}
int64_t resource_version(const json& o) { return std::stoll(o["metadata"]["resourceVersion"].get<std::string>()); }

const json GANG = {{"runPolicy", {{"schedulingPolicy", {{"gang", "coscheduling"}, {"scheduleTimeoutSeconds", 300}}}}}};

TEST_F(SharedClusterTest, AGangJobHasItsPodGroupBeforeItsPods) {
  server_.put_object(operator_test::pod_group_crd());
  server_.put_object(gpu_node("train-1", {{"qsync.dev/pool", "training"}}, 4));
  server_.put_object(gpu_node("infer-1", {{"qsync.dev/pool", "inference"}}, 4));
  create_job(GANG);
  reconcile();
  ASSERT_EQ(pods().size(), 2u) << status().message;
  const json group = pod_group(server_);
  ASSERT_TRUE(group.is_object()) << "no PodGroup";
  EXPECT_EQ(group["spec"]["minMember"], 2);
  EXPECT_EQ(group["spec"]["scheduleTimeoutSeconds"], 300);
  EXPECT_EQ(group["metadata"]["ownerReferences"][0]["uid"], job()["metadata"]["uid"]);
  for (const json& p : pods()) {
    EXPECT_LT(resource_version(group), resource_version(p)) << "pod " << p["metadata"]["name"] << " was stored before its PodGroup";
    EXPECT_EQ(p["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"], "fm");
    EXPECT_EQ(p["spec"]["schedulerName"], "scheduler-plugins-scheduler");
  }
  set_running();
  reconcile();
  EXPECT_EQ(resource_version(pod_group(server_)), resource_version(group)) << "an unchanged PodGroup was written again";

  // count 1 -> 3: the PodGroup asks for 4 members before any pod of the new size exists.
  patch_spec({{"pool", {{"training", json::array({{{"name", "train"}, {"nodeSelector", {{"qsync.dev/pool", "training"}}}, {"count", 3}}})}}}});
  size_t seen_new = 0;
  for (int pass = 0; pass < 4; ++pass) {
    reconcile();
    for (const json& p : pods()) {
      if (env_of(p, "WORLD_SIZE") != "4") continue;
      ++seen_new;
      EXPECT_EQ(pod_group(server_)["spec"]["minMember"], 4);
      EXPECT_LT(resource_version(pod_group(server_)), resource_version(p));
    }
  }
  EXPECT_GT(seen_new, 0u);
  EXPECT_EQ(pod_group(server_)["spec"]["minMember"], 4);

  // The gang switched off: the PodGroup goes (the garbage collector would only take it with the job).
  patch_spec({{"runPolicy", {{"schedulingPolicy", nullptr}}}});
  reconcile();
  EXPECT_TRUE(pod_group(server_).is_null()) << pod_group(server_).dump();
  reconcile();  // nothing left to delete
  EXPECT_TRUE(pod_group(server_).is_null());
}

TEST_F(SharedClusterTest, AGangJobWithoutThePodGroupCrdCreatesNoPods) {
  server_.put_object(gpu_node("train-1", {{"qsync.dev/pool", "training"}}, 4));
  server_.put_object(gpu_node("infer-1", {{"qsync.dev/pool", "inference"}}, 4));
  create_job(GANG);
  reconcile();
  EXPECT_TRUE(pods().empty());
  EXPECT_EQ(condition_reason(api::CONDITION_CREATED), "CreateFailed");
  EXPECT_NE(status().message.find("PodGroup resource (scheduling.x-k8s.io/v1alpha1 podgroups) is not installed"),
            std::string::npos)
      << status().message;
  server_.put_object(operator_test::pod_group_crd());  // installed later: the next pass goes on
  reconcile();
  EXPECT_EQ(pods().size(), 2u) << status().message;
  EXPECT_EQ(pod_group(server_)["spec"]["minMember"], 2);
}

}  // namespace
}  // namespace qsync::reconciler
