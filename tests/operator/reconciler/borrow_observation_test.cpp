// File: tests/operator/reconciler/borrow_observation_test.cpp
// API objects as the lending decision's observations: a Deployment and its pods (selected by
// labels, Ready, Pending for capacity, finished), its annotations, a workload lent to another job
// (not opted in for this one), the template's GPUs, and Nodes and Pods for GPU accounting (the
// job's own pods marked by their controller).
#include <gtest/gtest.h>

#include "operator/reconciler/borrow_observation.h"

namespace qsync::reconciler {
namespace {

using json = nlohmann::json;

json workload(int replicas, json annotations) {
  return {{"kind", "Deployment"},
          {"metadata", {{"name", "chat"}, {"namespace", "default"}, {"annotations", annotations}}},
          {"spec",
           {{"replicas", replicas},
            {"selector", {{"matchLabels", {{"app", "chat"}}}}},
            {"template", {{"spec", {{"containers", json::array({{{"name", "s"}, {"resources", {{"limits", {{"nvidia.com/gpu", "2"}}}}}}})}}}}}}}};
}

json pod(const std::string& name, const std::string& app, json status, const std::string& node = "n1") {
  json p = {{"metadata", {{"name", name}, {"namespace", "default"}, {"labels", {{"app", app}}}}},
            {"spec", {{"containers", json::array({{{"name", "s"}, {"resources", {{"limits", {{"nvidia.com/gpu", 1}}}}}}})}}},
            {"status", status}};
  if (!node.empty()) p["spec"]["nodeName"] = node;
  return p;
}

const json kReady = {{"phase", "Running"}, {"conditions", json::array({{{"type", "Ready"}, {"status", "True"}}})}};
const json kPending = {{"phase", "Pending"},
                       {"conditions", json::array({{{"type", "PodScheduled"}, {"status", "False"}, {"reason", "Unschedulable"}}})}};

TEST(BorrowObservation, WorkloadAndItsPods) {
  const json w = workload(3, {{LENDABLE_ANNOTATION, "true"}, {SERVING_REPLICAS_ANNOTATION, "4"},
                              {LENDING_REPLICAS_ANNOTATION, "3"}, {LENT_TO_ANNOTATION, "fm"}});
  const std::vector<json> pods = {pod("a", "chat", kReady), pod("b", "chat", {{"phase", "Running"}}),
                                  pod("c", "chat", kPending, ""), pod("d", "chat", {{"phase", "Succeeded"}}),
                                  pod("e", "other", kReady)};
  const lending::WorkloadObservation o = observe_workload(w, pods, "fm");
  EXPECT_TRUE(o.exists);
  EXPECT_TRUE(o.opted_in);
  EXPECT_EQ(o.replicas, 3);
  EXPECT_EQ(o.pods, 3);
  EXPECT_EQ(o.ready_replicas, 1);
  EXPECT_EQ(o.unschedulable_pods, 1);
  EXPECT_EQ(o.serving_replicas, 4);
  EXPECT_EQ(o.replicas_set, 3);
  EXPECT_EQ(workload_gpus_per_replica(w), 2);
  // Lent to another job: not this one's to lend, nor its annotations to read.
  const lending::WorkloadObservation other = observe_workload(w, pods, "other-job");
  EXPECT_FALSE(other.opted_in);
  EXPECT_EQ(other.serving_replicas, 0);
  EXPECT_FALSE(observe_workload(workload(3, json::object()), pods, "fm").opted_in);
  EXPECT_FALSE(observe_workload(json(), pods, "fm").exists);
}

TEST(BorrowObservation, NodesAndPodsForGpuAccounting) {
  const json node = {{"metadata", {{"name", "n1"}}},
                     {"status", {{"allocatable", {{"nvidia.com/gpu", "4"}}}, {"conditions", json::array({{{"type", "Ready"}, {"status", "True"}}})}}}};
  const json cpu_node = {{"metadata", {{"name", "n2"}}}, {"status", {{"allocatable", {{"cpu", "8"}}}}}};
  const std::vector<lending::NodeObservation> nodes = observe_nodes({node, cpu_node});
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_TRUE(nodes[0].advertises_gpus);
  EXPECT_EQ(nodes[0].allocatable_gpus, 4);
  EXPECT_FALSE(nodes[1].advertises_gpus);
  json worker = pod("w", "worker", kReady);
  worker["metadata"]["ownerReferences"] = json::array({{{"uid", "job-uid"}, {"controller", true}, {"kind", "HybridTrainingJob"}}});
  const std::vector<lending::PodObservation> pods = observe_pods({worker, pod("a", "chat", kReady)}, "job-uid");
  ASSERT_EQ(pods.size(), 2u);
  EXPECT_TRUE(pods[0].job_pod);
  EXPECT_FALSE(pods[1].job_pod);
  EXPECT_EQ(lending::free_gpus(nodes, pods).at("n1"), 3);
  EXPECT_TRUE(pod_unschedulable(pod("c", "chat", kPending, "")));
  EXPECT_FALSE(pod_unschedulable(pod("a", "chat", kReady)));
}

}  // namespace
}  // namespace qsync::reconciler
