// File: operator/reconciler/pool_discovery.h
// Pool discovery: which node each rank of a HybridTrainingJob runs on, and as which device
// class. Ranks are numbered over the training entries first, then the inference entries, `count`
// ranks per entry, spread round-robin over the entry's matching nodes (by name; nodes no earlier
// entry uses come first). A node matches when its labels contain the entry's nodeSelector and it
// is schedulable (not cordoned, Ready). A rank's device class is the entry's deviceClass, else
// the node label qsync.dev/device-class, else the class mapped from nvidia.com/gpu.product
// ("Tesla-T4" -> gpu-t4, "NVIDIA-A100-SXM4-80GB" -> gpu-a100, ...). Its memory budget is the
// entry's memoryBudget, else the node's allocatable memory on CPU classes (GPU classes: 0 here,
// the planner takes the device's memory from its estimate).
//
// An elastic job's pool (PoolCapacity) bends instead of failing: an entry no node matches gives
// no ranks, a node that advertises nvidia.com/gpu takes only the ranks its free GPUs hold (its
// GPUs minus what other pods request), a borrowing entry places exactly the ranks its lent GPUs
// give it (operator/lending/borrow_plan.h) and no more, and the pool is cut to maxRanks from
// the end (borrowed ranks go first).
//
//   const DiscoveredPool pool = discover_pool(job.spec.pool, node_objects);
//   pool.ranks[1].node, pool.ranks[1].device_class, pool.ranks[1].pool_kind
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "operator/api/hybrid_training_job.h"

namespace qsync::reconciler {

inline constexpr const char* POOL_KIND_TRAINING = "training";
inline constexpr const char* POOL_KIND_INFERENCE = "inference";
inline constexpr const char* DEVICE_CLASS_LABEL = "qsync.dev/device-class";
inline constexpr const char* GPU_PRODUCT_LABEL = "nvidia.com/gpu.product";

struct DiscoveredRank {
  int64_t rank = 0;
  std::string node;
  std::string device_class;
  std::string pool_kind;            // "training" or "inference" (loaned; reclaim shrinks these first)
  std::string entry;                // the pool entry's name
  int64_t memory_budget_bytes = 0;  // 0: the device's memory (GPU estimates) or unlimited
  int64_t gpus = 0;                 // nvidia.com/gpu per rank (GPU classes: gpusPerRank, default 1)
  int64_t predicted_memory_bytes = 0;  // the plan's predicted peak (0 until planned)
  bool operator==(const DiscoveredRank&) const = default;
};

struct DiscoveredPool {
  std::vector<DiscoveredRank> ranks;
  std::vector<std::string> notes;  // elastic: entries that gave fewer ranks than their count, and why
};

// How an elastic pool is bounded (null: the fixed pool of the spec).
struct PoolCapacity {
  // node -> GPUs free of other pods (lending::free_gpus); nodes absent here are not counted.
  std::map<std::string, int64_t> free_gpus;
  // Borrowing entries by name: node -> the ranks its lent GPUs give (an empty map: none now).
  std::map<std::string, std::map<std::string, int64_t>> borrowed;
  int64_t max_ranks = 0;  // 0: no cap
};

// Why a pool cannot be discovered. reason: "NoMatchingNodes" (nothing fits an entry's
// selector: a spec or cluster problem), "UnknownDeviceClass" (a node's labels name no class),
// "UntoleratedTaints" or "InsufficientCapacity" (wait for the cluster or a spec change).
class PoolDiscoveryError : public std::runtime_error {
 public:
  PoolDiscoveryError(std::string reason, const std::string& message)
      : std::runtime_error(message), reason_(std::move(reason)) {}
  const std::string& reason() const { return reason_; }

 private:
  std::string reason_;
};

struct PlacementLimits;  // node_placement.h

// Throws PoolDiscoveryError naming the entry and its selector, or the node and the known classes.
// With `limits` (free GPUs and CPU, the entries' tolerations): nodes whose NoSchedule/NoExecute
// taints the entry's pods do not tolerate are skipped (a note; all of them: UntoleratedTaints),
// and a node takes at most the ranks its free GPUs (GPU ranks) or free CPU (CPU ranks) hold (a
// fixed pool that does not fit: InsufficientCapacity; elastic pools give fewer ranks).
DiscoveredPool discover_pool(const api::PoolSpec& pool, const std::vector<nlohmann::json>& nodes,
                             const PoolCapacity* capacity = nullptr, const PlacementLimits* limits = nullptr);

// The device class of an nvidia.com/gpu.product value (substring match, case-insensitive);
// "" when no known GPU matches.
std::string device_class_from_gpu_product(const std::string& product);

// Every device class a rank may name: the estimated GPU classes and the CPU classes.
std::vector<std::string> known_device_classes();
bool is_known_device_class(const std::string& device_class);
// Whether the class is an estimated GPU class (it gets nvidia.com/gpu and no --device-class).
bool is_gpu_device_class(const std::string& device_class);

// Not cordoned (spec.unschedulable) and its Ready condition is not False/Unknown.
bool node_is_schedulable(const nlohmann::json& node);

}  // namespace qsync::reconciler
