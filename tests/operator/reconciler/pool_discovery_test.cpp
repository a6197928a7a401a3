// File: tests/operator/reconciler/pool_discovery_test.cpp
// Pool discovery: selectors, round-robin placement, unschedulable nodes, device classes from the
// entry, the class label or the GPU product label, memory budgets, and the error messages; an
// elastic pool (PoolCapacity): missing nodes give no ranks, free GPUs cap ranks per node,
// borrowing entries place exactly their borrowed ranks, maxRanks cuts from the end.
#include <gtest/gtest.h>

#include "operator/reconciler/pool_discovery.h"

namespace qsync::reconciler {
namespace {

using json = nlohmann::json;

json node(const std::string& name, json labels, bool ready = true, bool cordoned = false, const std::string& memory = "16Gi") {
  return {{"metadata", {{"name", name}, {"labels", labels}}},
          {"spec", {{"unschedulable", cordoned}}},
          {"status",
           {{"allocatable", {{"memory", memory}}},
            {"conditions", json::array({{{"type", "Ready"}, {"status", ready ? "True" : "False"}}})}}}};
}

api::PoolEntry entry(const std::string& name, std::map<std::string, std::string> selector, int64_t count,
                     const std::string& device_class = "") {
  api::PoolEntry e;
  e.name = name;
  e.node_selector = std::move(selector);
  e.count = count;
  e.device_class = device_class;
  return e;
}

TEST(PoolDiscovery, GpuProductLabelsMapToClasses) {
  EXPECT_EQ(device_class_from_gpu_product("Tesla-T4"), "gpu-t4");
  EXPECT_EQ(device_class_from_gpu_product("NVIDIA-A10"), "gpu-a10");
  EXPECT_EQ(device_class_from_gpu_product("NVIDIA-A10G"), "gpu-a10");
  EXPECT_EQ(device_class_from_gpu_product("NVIDIA-L4"), "gpu-l4");
  EXPECT_EQ(device_class_from_gpu_product("Tesla-V100-SXM2-16GB"), "gpu-v100");
  EXPECT_EQ(device_class_from_gpu_product("NVIDIA-A100-SXM4-80GB"), "gpu-a100");
  EXPECT_EQ(device_class_from_gpu_product("NVIDIA-A100-PCIE-40GB"), "gpu-a100");
  EXPECT_EQ(device_class_from_gpu_product("nvidia-h100-80gb-hbm3"), "gpu-h100");
  EXPECT_EQ(device_class_from_gpu_product("NVIDIA-H200"), "gpu-h200");
  EXPECT_EQ(device_class_from_gpu_product("NVIDIA-L40S"), "");
  EXPECT_EQ(device_class_from_gpu_product("AMD-MI300X"), "");
  EXPECT_EQ(device_class_from_gpu_product(""), "");
}

TEST(PoolDiscovery, RanksFollowEntriesAndSelectors) {
  api::PoolSpec pool;
  pool.training = {entry("train", {{"pool", "training"}}, 2)};
  pool.inference = {entry("infer", {{"pool", "inference"}}, 1)};
  const std::vector<json> nodes = {node("t-2", {{"pool", "training"}, {"nvidia.com/gpu.product", "NVIDIA-A100-SXM4-80GB"}}),
                                   node("t-1", {{"pool", "training"}, {"nvidia.com/gpu.product", "NVIDIA-A100-SXM4-80GB"}}),
                                   node("i-1", {{"pool", "inference"}, {"nvidia.com/gpu.product", "Tesla-T4"}})};
  const DiscoveredPool p = discover_pool(pool, nodes);
  ASSERT_EQ(p.ranks.size(), 3u);
  EXPECT_EQ(p.ranks[0].node, "t-1");  // by name
  EXPECT_EQ(p.ranks[1].node, "t-2");
  EXPECT_EQ(p.ranks[2].node, "i-1");
  EXPECT_EQ(p.ranks[0].device_class, "gpu-a100");
  EXPECT_EQ(p.ranks[2].device_class, "gpu-t4");
  EXPECT_EQ(p.ranks[0].pool_kind, "training");
  EXPECT_EQ(p.ranks[2].pool_kind, "inference");
  EXPECT_EQ(p.ranks[2].rank, 2);
  EXPECT_EQ(p.ranks[2].gpus, 1);
  EXPECT_EQ(p.ranks[0].memory_budget_bytes, 0);  // GPU: the device's memory, from the estimate
}

TEST(PoolDiscovery, RoundRobinPrefersNodesOtherEntriesLeftFree) {
  api::PoolSpec pool;
  pool.training = {entry("a", {{"zone", "x"}}, 1), entry("b", {{"zone", "x"}}, 3)};
  const std::vector<json> nodes = {node("n1", {{"zone", "x"}, {"qsync.dev/device-class", "cpu-avx2"}}),
                                   node("n2", {{"zone", "x"}, {"qsync.dev/device-class", "cpu-avx2"}})};
  const DiscoveredPool p = discover_pool(pool, nodes);
  ASSERT_EQ(p.ranks.size(), 4u);
  EXPECT_EQ(p.ranks[0].node, "n1");
  EXPECT_EQ(p.ranks[1].node, "n2");  // entry b starts on the node entry a left free
  EXPECT_EQ(p.ranks[2].node, "n1");
  EXPECT_EQ(p.ranks[3].node, "n2");
}

TEST(PoolDiscovery, SkipsCordonedAndNotReadyNodes) {
  api::PoolSpec pool;
  pool.training = {entry("train", {{"pool", "t"}}, 2, "cpu-avx2")};
  const std::vector<json> nodes = {node("a", {{"pool", "t"}}, true, true), node("b", {{"pool", "t"}}, false),
                                   node("c", {{"pool", "t"}})};
  const DiscoveredPool p = discover_pool(pool, nodes);
  ASSERT_EQ(p.ranks.size(), 2u);
  EXPECT_EQ(p.ranks[0].node, "c");
  EXPECT_EQ(p.ranks[1].node, "c");
  EXPECT_FALSE(node_is_schedulable(nodes[0]));
  EXPECT_FALSE(node_is_schedulable(nodes[1]));
}

TEST(PoolDiscovery, ClassPrecedenceAndCpuMemory) {
  api::PoolSpec pool;
  pool.training = {entry("explicit", {{"role", "x"}}, 1, "cpu-avx512"), entry("labelled", {{"role", "y"}}, 1)};
  pool.training[1].memory_budget = "2Gi";
  pool.training[1].memory_budget_bytes = 2ll << 30;
  const std::vector<json> nodes = {
      node("x", {{"role", "x"}, {"qsync.dev/device-class", "cpu-avx2"}, {"nvidia.com/gpu.product", "Tesla-T4"}}, true, false, "32Gi"),
      node("y", {{"role", "y"}, {"qsync.dev/device-class", "gpu-l4"}, {"nvidia.com/gpu.product", "Tesla-T4"}})};
  const DiscoveredPool p = discover_pool(pool, nodes);
  EXPECT_EQ(p.ranks[0].device_class, "cpu-avx512");
  EXPECT_EQ(p.ranks[0].memory_budget_bytes, 32ll << 30);  // CPU: the node's allocatable memory
  EXPECT_EQ(p.ranks[0].gpus, 0);
  EXPECT_EQ(p.ranks[1].device_class, "gpu-l4");             // the class label wins over the product
  EXPECT_EQ(p.ranks[1].memory_budget_bytes, 2ll << 30);     // the entry's budget
}

TEST(PoolDiscovery, NoMatchingNodeNamesTheEntryAndSelector) {
  api::PoolSpec pool;
  pool.inference = {entry("infer", {{"qsync.dev/pool", "inference"}}, 1)};
  try {
    discover_pool(pool, {node("a", {{"qsync.dev/pool", "training"}})});
    FAIL() << "expected PoolDiscoveryError";
  } catch (const PoolDiscoveryError& e) {
    EXPECT_EQ(e.reason(), "NoMatchingNodes");
    const std::string m = e.what();
    EXPECT_NE(m.find("spec.pool.inference[0] (infer)"), std::string::npos) << m;
    EXPECT_NE(m.find("qsync.dev/pool: inference"), std::string::npos) << m;
  }
}

TEST(PoolDiscovery, UnknownClassListsTheKnownOnes) {
  api::PoolSpec pool;
  pool.training = {entry("train", {}, 1)};
  try {
    discover_pool(pool, {node("mystery", {{"nvidia.com/gpu.product", "AMD-MI300X"}})});
    FAIL() << "expected PoolDiscoveryError";
  } catch (const PoolDiscoveryError& e) {
    EXPECT_EQ(e.reason(), "UnknownDeviceClass");
    const std::string m = e.what();
    EXPECT_NE(m.find("node mystery"), std::string::npos) << m;
    EXPECT_NE(m.find("gpu-t4"), std::string::npos) << m;
    EXPECT_NE(m.find("cpu-avx2"), std::string::npos) << m;
  }
  pool.training[0].device_class = "tpu-v5";
  EXPECT_THROW(discover_pool(pool, {node("n", {})}), PoolDiscoveryError);
}

TEST(PoolDiscovery, ElasticPoolsBendInsteadOfFailing) {
  api::PoolSpec pool;
  pool.training = {entry("train", {{"pool", "train"}}, 3, "gpu-a100")};
  pool.inference = {entry("lent", {{"pool", "infer"}}, 8, "gpu-t4"), entry("spare", {{"pool", "gone"}}, 1, "gpu-t4")};
  const std::vector<json> nodes = {node("a1", {{"pool", "train"}}), node("a2", {{"pool", "train"}}),
                                   node("i1", {{"pool", "infer"}}), node("i2", {{"pool", "infer"}})};
  EXPECT_THROW(discover_pool(pool, nodes), PoolDiscoveryError) << "fixed pools still fail on a missing selector";
  PoolCapacity c;
  c.free_gpus = {{"a1", 2}, {"a2", 0}};               // a2's GPU is taken by another pod
  c.borrowed = {{"lent", {{"i2", 2}, {"i1", 1}}}};    // what the lending decisions lent
  DiscoveredPool p = discover_pool(pool, nodes, &c);
  ASSERT_EQ(p.ranks.size(), 5u);
  EXPECT_EQ(p.ranks[0].node, "a1");
  EXPECT_EQ(p.ranks[1].node, "a1");
  EXPECT_EQ(p.ranks[2].node, "i1");
  EXPECT_EQ(p.ranks[3].node, "i2");
  EXPECT_EQ(p.ranks[4].node, "i2");
  EXPECT_EQ(p.ranks[4].pool_kind, POOL_KIND_INFERENCE);
  ASSERT_EQ(p.notes.size(), 2u);
  EXPECT_NE(p.notes[0].find("2 of 3 ranks"), std::string::npos) << p.notes[0];
  EXPECT_NE(p.notes[1].find("no node matches spec.pool.inference[1] (spare)"), std::string::npos) << p.notes[1];
  c.max_ranks = 3;
  p = discover_pool(pool, nodes, &c);
  ASSERT_EQ(p.ranks.size(), 3u);
  EXPECT_EQ(p.ranks[2].entry, "lent") << "borrowed ranks go first from the end";
  c.borrowed["lent"].clear();
  EXPECT_EQ(discover_pool(pool, nodes, &c).ranks.size(), 2u);
}

}  // namespace
}  // namespace qsync::reconciler
