// File: operator/lending/gpu_accounting.cpp
// Free GPUs per node and the ranks a job may borrow (see gpu_accounting.h).
#include "operator/lending/gpu_accounting.h"

#include <algorithm>

namespace qsync::lending {

std::map<std::string, int64_t> free_gpus(const std::vector<NodeObservation>& nodes, const std::vector<PodObservation>& pods) {
  std::map<std::string, int64_t> free;
  for (const NodeObservation& n : nodes)
    if (n.schedulable && n.advertises_gpus) free[n.name] = n.allocatable_gpus;
  for (const PodObservation& p : pods) {
    if (p.job_pod || p.finished || p.node.empty() || p.gpus <= 0) continue;
    auto it = free.find(p.node);
    if (it != free.end()) it->second -= p.gpus;
  }
  for (auto& [node, gpus] : free) gpus = std::max<int64_t>(0, gpus);
  return free;
}

std::map<std::string, int64_t> borrowed_ranks(const std::vector<std::string>& nodes, const std::map<std::string, int64_t>& free,
                                              int64_t budget_gpus, int64_t owed_gpus, int64_t gpus_per_rank, int64_t max_ranks) {
  std::vector<std::string> sorted = nodes;
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  std::map<std::string, int64_t> usable;
  for (const std::string& n : sorted) {
    auto it = free.find(n);
    if (it != free.end() && it->second > 0) usable[n] = it->second;
  }
  // What the workload is owed comes off the last nodes first.
  for (auto it = sorted.rbegin(); it != sorted.rend() && owed_gpus > 0; ++it) {
    auto u = usable.find(*it);
    if (u == usable.end()) continue;
    const int64_t take = std::min(u->second, owed_gpus);
    u->second -= take;
    owed_gpus -= take;
  }
  std::map<std::string, int64_t> ranks;
  if (gpus_per_rank <= 0) return ranks;
  int64_t budget = std::max<int64_t>(0, budget_gpus), placed = 0;
  for (const std::string& n : sorted) {
    auto u = usable.find(n);
    if (u == usable.end()) continue;
    const int64_t fit = std::min({u->second / gpus_per_rank, budget / gpus_per_rank, max_ranks - placed});
    if (fit <= 0) continue;
    ranks[n] = fit;
    placed += fit;
    budget -= fit * gpus_per_rank;
  }
  return ranks;
}

}  // namespace qsync::lending
