// File: operator/lending/borrow_plan.cpp
// Lending decisions and borrowed ranks of every borrowing entry of a job (see borrow_plan.h).
#include "operator/lending/borrow_plan.h"

#include <algorithm>

#include "operator/lending/gpu_accounting.h"

namespace qsync::lending {

std::vector<BorrowPlan> plan_borrowing(const std::vector<BorrowEntry>& entries, std::map<std::string, int64_t> free, double now) {
  std::vector<BorrowPlan> out;
  for (const BorrowEntry& e : entries) {
    BorrowPlan plan;
    plan.entry = e.entry;
    LendingInputs in;
    in.policy = e.policy;
    in.workload = e.workload;
    in.demand = e.demand;
    in.now = now;
    in.memory = e.memory;
    plan.decision = decide_lending(in);
    const LendingDecision& d = plan.decision;
    const int64_t gpr = std::max<int64_t>(0, e.gpus_per_replica);
    const int64_t owed = gpr * (e.workload.unschedulable_pods + std::max<int64_t>(0, d.target_replicas - e.workload.pods));
    plan.ranks = borrowed_ranks(e.nodes, free, d.lendable_replicas * gpr, owed, e.gpus_per_rank, e.max_ranks);
    for (const auto& [node, ranks] : plan.ranks) {
      plan.borrowed_gpus += ranks * e.gpus_per_rank;
      free[node] -= ranks * e.gpus_per_rank;
    }
    out.push_back(std::move(plan));
  }
  return out;
}

}  // namespace qsync::lending
