// File: tests/operator/reconciler/node_placement_test.cpp
// What a node can take of a job: free GPUs and CPU counted as the scheduler counts them (other
// pods' requests, finished pods and the job's own excluded), Kubernetes' toleration rules, and
// pool discovery under those limits: tainted nodes skipped with the taint and the fix named, at
// most the free GPUs (GPU ranks) or free CPU (CPU ranks) per node, a fixed pool that does not
// fit waits (InsufficientCapacity) instead of stacking ranks on a node.
#include <gtest/gtest.h>

#include "operator/reconciler/node_placement.h"
#include "operator/reconciler/pool_discovery.h"

namespace qsync::reconciler {
namespace {

using json = nlohmann::json;

json node(const std::string& name, json labels, json allocatable, json taints = json::array()) {
  return {{"metadata", {{"name", name}, {"labels", labels}}},
          {"spec", {{"taints", taints}}},
          {"status", {{"allocatable", allocatable}, {"conditions", json::array({{{"type", "Ready"}, {"status", "True"}}})}}}};
}

json pod(const std::string& node_name, json requests, const std::string& phase = "Running", const std::string& owner_uid = "") {
  json p = {{"metadata", {{"name", "p"}, {"namespace", "x"}}},
            {"spec", {{"nodeName", node_name}, {"containers", json::array({{{"name", "c"}, {"resources", {{"requests", requests}, {"limits", requests}}}}})}}},
            {"status", {{"phase", phase}}}};
  if (!owner_uid.empty())
    p["metadata"]["ownerReferences"] = json::array(
        {{{"apiVersion", "qsync.dev/v1alpha1"}, {"kind", "HybridTrainingJob"}, {"name", "j"}, {"uid", owner_uid}, {"controller", true}}});
  return p;
}

api::HybridTrainingJob job(json spec_patch = json::object()) {
  json spec = {{"model", {{"zoo", "mlp"}}},
               {"steps", 10},
               {"pool",
                {{"training", json::array({{{"name", "train"}, {"nodeSelector", {{"pool", "t"}}}, {"count", 2}, {"deviceClass", "gpu-t4"}}})},
                 {"inference", json::array({{{"name", "infer"}, {"nodeSelector", {{"pool", "i"}}}, {"count", 1}, {"deviceClass", "gpu-t4"}}})}}}};
  spec.merge_patch(spec_patch);
  api::HybridTrainingJob j;
  j.metadata = {{"name", "j"}, {"namespace", "x"}, {"uid", "u"}};
  j.spec = api::hybrid_training_job_spec_from_json(spec);
  return j;
}

const json GPU_TAINT = {{"key", "nvidia.com/gpu"}, {"value", "present"}, {"effect", "NoSchedule"}};
const json INFERENCE_TAINT = {{"key", "dedicated"}, {"value", "inference"}, {"effect", "NoSchedule"}};

TEST(NodePlacement, TolerationRules) {
  EXPECT_TRUE(tolerates({{"operator", "Exists"}}, GPU_TAINT));  // empty key + Exists: every taint
  EXPECT_TRUE(tolerates({{"key", "nvidia.com/gpu"}, {"operator", "Exists"}}, GPU_TAINT));
  EXPECT_TRUE(tolerates({{"key", "nvidia.com/gpu"}, {"operator", "Exists"}, {"effect", "NoSchedule"}}, GPU_TAINT));
  EXPECT_FALSE(tolerates({{"key", "nvidia.com/gpu"}, {"operator", "Exists"}, {"effect", "NoExecute"}}, GPU_TAINT));
  EXPECT_TRUE(tolerates({{"key", "dedicated"}, {"value", "inference"}}, INFERENCE_TAINT));  // Equal by default
  EXPECT_FALSE(tolerates({{"key", "dedicated"}, {"operator", "Equal"}, {"value", "training"}}, INFERENCE_TAINT));
  const json prefer = node("n", json::object(), json::object(),
                           json::array({{{"key", "k"}, {"effect", "PreferNoSchedule"}}, INFERENCE_TAINT}));
  const std::vector<json> bad = untolerated_taints(prefer, json::array());
  ASSERT_EQ(bad.size(), 1u);  // PreferNoSchedule only scores
  EXPECT_EQ(taint_text(bad[0]), "dedicated=inference:NoSchedule");
  EXPECT_DOUBLE_EQ(cpu_quantity("500m", "x"), 0.5);
  EXPECT_DOUBLE_EQ(cpu_quantity("2", "x"), 2);
  EXPECT_THROW(cpu_quantity("two", "x"), std::invalid_argument);
}

TEST(NodePlacement, FreeGpusAndCpuCountOtherPodsOnly) {
  const std::vector<json> nodes = {node("t-1", {{"pool", "t"}}, {{"nvidia.com/gpu", "2"}, {"cpu", "8"}})};
  const std::vector<json> pods = {pod("t-1", {{"nvidia.com/gpu", "1"}, {"cpu", "1500m"}}),
                                  pod("t-1", {{"nvidia.com/gpu", "1"}, {"cpu", "4"}}, "Succeeded"),   // holds nothing
                                  pod("t-1", {{"nvidia.com/gpu", "1"}, {"cpu", "2"}}, "Running", "u")};  // the job's own
  const PlacementLimits l = placement_limits(nodes, pods, "u", job(), json::array());
  EXPECT_EQ(l.free_gpus.at("t-1"), 1);
  EXPECT_DOUBLE_EQ(l.free_cpus.at("t-1"), 6.5);
}

// The pool: the inference node is tainted, the training node has one GPU free of two.
TEST(NodePlacement, TaintedNodesAreSkippedAndGpusCapRanksPerNode) {
  const std::vector<json> nodes = {node("i-1", {{"pool", "i"}}, {{"nvidia.com/gpu", "4"}}, json::array({INFERENCE_TAINT})),
                                   node("t-1", {{"pool", "t"}}, {{"nvidia.com/gpu", "2"}}),
                                   node("t-2", {{"pool", "t"}}, {{"nvidia.com/gpu", "2"}})};
  const std::vector<json> pods = {pod("t-1", {{"nvidia.com/gpu", "1"}})};
  api::HybridTrainingJob j = job();
  PlacementLimits l = placement_limits(nodes, pods, "u", j, json::array());
  try {
    discover_pool(j.spec.pool, nodes, nullptr, &l);
    FAIL() << "the tainted inference node was used";
  } catch (const PoolDiscoveryError& e) {
    EXPECT_EQ(e.reason(), "UntoleratedTaints");
    EXPECT_NE(std::string(e.what()).find("i-1 (dedicated=inference:NoSchedule)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("spec.pool.inference[0].podTemplate.tolerations"), std::string::npos) << e.what();
  }

  j = job({{"podTemplate", {{"tolerations", json::array({{{"key", "dedicated"}, {"operator", "Exists"}}})}}}});
  l = placement_limits(nodes, pods, "u", j, json::array());
  DiscoveredPool p = discover_pool(j.spec.pool, nodes, nullptr, &l);
  ASSERT_EQ(p.ranks.size(), 3u);
  EXPECT_EQ(p.ranks[0].node, "t-1");
  EXPECT_EQ(p.ranks[1].node, "t-2");
  EXPECT_EQ(p.ranks[2].node, "i-1");

  // Three training ranks: t-1 holds 1, t-2 holds 2; four do not fit, and the job waits.
  j = job({{"podTemplate", {{"tolerations", json::array({{{"operator", "Exists"}}})}}},
           {"pool", {{"training", json::array({{{"name", "train"}, {"nodeSelector", {{"pool", "t"}}}, {"count", 3}, {"deviceClass", "gpu-t4"}}})}}}});
  l = placement_limits(nodes, pods, "u", j, json::array());
  p = discover_pool(j.spec.pool, nodes, nullptr, &l);
  ASSERT_EQ(p.ranks.size(), 4u);
  EXPECT_EQ(p.ranks[0].node, "t-1");
  EXPECT_EQ(p.ranks[1].node, "t-2");
  EXPECT_EQ(p.ranks[2].node, "t-2");  // t-1's one free GPU is taken

  j.spec.pool.training[0].count = 4;
  try {
    discover_pool(j.spec.pool, nodes, nullptr, &l);
    FAIL() << "four ranks were stacked on three free GPUs";
  } catch (const PoolDiscoveryError& e) {
    EXPECT_EQ(e.reason(), "InsufficientCapacity");
    EXPECT_NE(std::string(e.what()).find("3 of 4 ranks fit"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("t-1: 1 free GPUs"), std::string::npos) << e.what();
  }
}

TEST(NodePlacement, GpuDefaultTolerationsApplyToGpuRanksOnly) {
  const std::vector<json> nodes = {node("g", {{"pool", "t"}}, {{"nvidia.com/gpu", "1"}}, json::array({GPU_TAINT})),
                                   node("c", {{"pool", "i"}, {"qsync.dev/device-class", "cpu-avx2"}}, {{"cpu", "4"}},
                                        json::array({GPU_TAINT}))};
  api::HybridTrainingJob j = job({{"pool",
                                   {{"training", json::array({{{"name", "train"}, {"nodeSelector", {{"pool", "t"}}}, {"count", 1}, {"deviceClass", "gpu-t4"}}})},
                                    {"inference", json::array({{{"name", "infer"}, {"nodeSelector", {{"pool", "i"}}}, {"count", 1}}})}}}});
  const json gpu_default = json::array({{{"key", "nvidia.com/gpu"}, {"operator", "Exists"}, {"effect", "NoSchedule"}}});
  const PlacementLimits l = placement_limits(nodes, {}, "u", j, gpu_default);
  try {
    discover_pool(j.spec.pool, nodes, nullptr, &l);
    FAIL() << "a CPU rank took the GPU default toleration";
  } catch (const PoolDiscoveryError& e) {
    EXPECT_NE(std::string(e.what()).find("c (nvidia.com/gpu=present:NoSchedule)"), std::string::npos) << e.what();
  }
  j.spec.pool.inference.clear();
  EXPECT_EQ(discover_pool(j.spec.pool, nodes, nullptr, &l).ranks.size(), 1u);
}

TEST(NodePlacement, CpuRanksAreCappedByFreeCpu) {
  const std::vector<json> nodes = {node("c-1", {{"pool", "i"}}, {{"cpu", "3"}}), node("c-2", {{"pool", "i"}}, {{"cpu", "2"}})};
  api::HybridTrainingJob j = job({{"resources", {{"requests", {{"cpu", "2"}}}}},
                                  {"pool", {{"training", nullptr},
                                            {"inference", json::array({{{"name", "infer"}, {"nodeSelector", {{"pool", "i"}}}, {"count", 2}, {"deviceClass", "cpu-avx2"}}})}}}});
  const PlacementLimits l = placement_limits(nodes, {pod("c-1", {{"cpu", "1500m"}})}, "u", j, json::array());
  // c-1 has 1.5 cores free, less than one rank's 2: both ranks cannot fit.
  EXPECT_THROW(discover_pool(j.spec.pool, nodes, nullptr, &l), PoolDiscoveryError);
  j.spec.pool.inference[0].count = 1;
  const DiscoveredPool p = discover_pool(j.spec.pool, nodes, nullptr, &l);
  ASSERT_EQ(p.ranks.size(), 1u);
  EXPECT_EQ(p.ranks[0].node, "c-2");
}

}  // namespace
}  // namespace qsync::reconciler
