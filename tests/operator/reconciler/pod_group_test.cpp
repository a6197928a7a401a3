// File: tests/operator/reconciler/pod_group_test.cpp
// Gang scheduling's desired objects (operator/reconciler/pod_group.h): the PodGroup of a
// coscheduling job (minMember = the world size, the job's timeout, an owner reference to the
// job), the worker pods' pod-group label and schedulerName (the user's kept), node affinity to
// every planned node of the entry once a scheduler places the pods, and when a live PodGroup
// needs an update.
#include <gtest/gtest.h>

#include "operator/api/hybrid_training_job.h"
#include "operator/reconciler/desired_children.h"
#include "operator/reconciler/pod_group.h"

namespace qsync::reconciler {
namespace {

using json = nlohmann::json;

json job_object(json spec_patch = json::object()) {
  json spec = {{"model", {{"zoo", "mlp"}}},
               {"steps", 100},
               {"pool", {{"training", json::array({{{"name", "train"}, {"count", 2}, {"deviceClass", "cpu-avx2"}}})}}},
               {"runPolicy", {{"schedulingPolicy", {{"gang", "coscheduling"}, {"scheduleTimeoutSeconds", 120}}}}}};
  spec.merge_patch(spec_patch);
  return {{"apiVersion", "qsync.dev/v1alpha1"},
          {"kind", "HybridTrainingJob"},
          {"metadata", {{"name", "gang"}, {"namespace", "team"}, {"uid", "uid-7"}, {"generation", 1}}},
          {"spec", spec}};
}

std::vector<DiscoveredRank> two_ranks() {
  return {{0, "node-a", "cpu-avx2", POOL_KIND_TRAINING, "train", 1ll << 30, 0},
          {1, "node-b", "cpu-avx2", POOL_KIND_TRAINING, "train", 1ll << 30, 0}};
}

TEST(PodGroup, HasTheWorldSizeTheTimeoutAndTheJobAsOwner) {
  const json object = job_object();
  const api::HybridTrainingJob job = api::hybrid_training_job_from_json(object);
  const json group = desired_pod_group(object, job, 2);
  EXPECT_EQ(group["apiVersion"], "scheduling.x-k8s.io/v1alpha1");
  EXPECT_EQ(group["kind"], "PodGroup");
  EXPECT_EQ(group["metadata"]["name"], "gang");
  EXPECT_EQ(group["metadata"]["namespace"], "team");
  EXPECT_EQ(group["metadata"]["labels"][JOB_LABEL], "gang");
  EXPECT_EQ(group["spec"]["minMember"], 2);
  EXPECT_EQ(group["spec"]["scheduleTimeoutSeconds"], 120);
  ASSERT_EQ(group["metadata"]["ownerReferences"].size(), 1u);
  EXPECT_EQ(group["metadata"]["ownerReferences"][0]["uid"], "uid-7");
  EXPECT_EQ(group["metadata"]["ownerReferences"][0]["controller"], true);

  const kube::ResourceType type = pod_group_type(*job_gang_scheduler(job));
  EXPECT_EQ(type.path("team", "gang"), "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/team/podgroups/gang");

  // Without a timeout the scheduler's default applies: the field is left out.
  const json untimed = job_object({{"runPolicy", {{"schedulingPolicy", {{"scheduleTimeoutSeconds", nullptr}}}}}});
  EXPECT_FALSE(desired_pod_group(untimed, api::hybrid_training_job_from_json(untimed), 2)["spec"].contains("scheduleTimeoutSeconds"));
}

TEST(PodGroup, NoGangNoPodGroupAndNoLabel) {
  const json object = job_object({{"runPolicy", {{"schedulingPolicy", nullptr}}}});
  const api::HybridTrainingJob job = api::hybrid_training_job_from_json(object);
  EXPECT_EQ(job_gang_scheduler(job), nullptr);
  EXPECT_THROW((void)desired_pod_group(object, job, 2), std::logic_error);
  const json pod = desired_pod(object, job, two_ranks()[0], 2, 0, {}, two_ranks());
  EXPECT_FALSE(pod["metadata"]["labels"].contains("scheduling.x-k8s.io/pod-group"));
  EXPECT_FALSE(pod["spec"].contains("schedulerName"));
  // Pinned to its own node: the default scheduler needs no choice.
  EXPECT_EQ(pod["spec"]["affinity"].dump().find("node-b"), std::string::npos);
}

TEST(PodGroup, PodsCarryTheGroupLabelAndTheGangSchedulerUnlessTheUserNamesOne) {
  const json object = job_object();
  const api::HybridTrainingJob job = api::hybrid_training_job_from_json(object);
  const json pod = desired_pod(object, job, two_ranks()[0], 2, 0, {}, two_ranks());
  EXPECT_EQ(pod["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"], "gang");
  EXPECT_EQ(pod["spec"]["schedulerName"], "scheduler-plugins-scheduler");
  // The scheduler places the gang: any node planned for the entry, not one pinned host.
  const json values = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
                         ["nodeSelectorTerms"][0]["matchExpressions"][0]["values"];
  EXPECT_EQ(values, json::array({"node-a", "node-b"}));

  const json named = job_object({{"podTemplate", {{"schedulerName", "coscheduler"}}}});
  const json named_pod = desired_pod(named, api::hybrid_training_job_from_json(named), two_ranks()[1], 2, 0, {}, two_ranks());
  EXPECT_EQ(named_pod["spec"]["schedulerName"], "coscheduler");
  EXPECT_EQ(named_pod["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"], "gang");

  // --gang-scheduler-name: the cluster's name for it, unless the job names one.
  ChildOptions options;
  options.gang_scheduler_name = "default-scheduler";
  EXPECT_EQ(desired_pod(object, job, two_ranks()[0], 2, 0, options, two_ranks())["spec"]["schedulerName"], "default-scheduler");
  EXPECT_EQ(desired_pod(named, api::hybrid_training_job_from_json(named), two_ranks()[1], 2, 0, options, two_ranks())["spec"]
                       ["schedulerName"],
            "coscheduler");
}

TEST(PodGroup, ALivePodGroupMatchesOnlyWithTheSameSpecAndOwner) {
  const json object = job_object();
  const api::HybridTrainingJob job = api::hybrid_training_job_from_json(object);
  json live = desired_pod_group(object, job, 2);
  live["metadata"]["resourceVersion"] = "17";
  live["status"] = {{"phase", "Running"}, {"scheduled", 2}};
  EXPECT_TRUE(pod_group_matches(live, desired_pod_group(object, job, 2)));
  EXPECT_FALSE(pod_group_matches(live, desired_pod_group(object, job, 3)));  // a re-plan to 3 ranks
  const json untimed = job_object({{"runPolicy", {{"schedulingPolicy", {{"scheduleTimeoutSeconds", nullptr}}}}}});
  EXPECT_FALSE(pod_group_matches(live, desired_pod_group(untimed, api::hybrid_training_job_from_json(untimed), 2)));
  json foreign = live;
  foreign["metadata"]["ownerReferences"][0]["uid"] = "someone-else";
  EXPECT_FALSE(pod_group_matches(foreign, desired_pod_group(object, job, 2)));
}

}  // namespace
}  // namespace qsync::reconciler
