// File: operator/lending/borrow_plan.h
// A job's borrowing over all its borrowing entries at one moment: each entry's lending decision
// (lending_decision.h), then the ranks its lent GPUs give the job on the entry's nodes
// (gpu_accounting.h): at most lendable replicas x GPUs per replica, whole ranks, at most the
// entry's count, and what the workload is owed (pods Pending for capacity, replicas not created
// yet) left free. Entries take GPUs in order, so two entries on the same nodes never count a GPU
// twice. Pure: the reconciler and the simulation call it with what they observed.
//
//   const std::vector<BorrowPlan> plans = plan_borrowing(entries, free_gpus(nodes, pods), now);
//   plans[0].decision.target_replicas, plans[0].ranks   // node -> ranks
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "operator/lending/lending_decision.h"

namespace qsync::lending {

struct BorrowEntry {
  std::string entry;                  // the pool entry's name
  const LendingPolicy* policy = nullptr;
  WorkloadObservation workload;
  std::optional<DemandSample> demand;
  LendingMemory memory;
  std::vector<std::string> nodes;     // nodes matching the entry's nodeSelector
  int64_t gpus_per_replica = 1;       // nvidia.com/gpu of one workload pod
  int64_t gpus_per_rank = 1;
  int64_t max_ranks = 1;              // the entry's count
};

struct BorrowPlan {
  std::string entry;
  LendingDecision decision;
  std::map<std::string, int64_t> ranks;  // node -> ranks the job may place there
  int64_t borrowed_gpus = 0;              // sum of ranks x gpus_per_rank
};

std::vector<BorrowPlan> plan_borrowing(const std::vector<BorrowEntry>& entries, std::map<std::string, int64_t> free, double now);

}  // namespace qsync::lending
