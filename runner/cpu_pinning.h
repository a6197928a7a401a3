// File: runner/cpu_pinning.h
// Which CPUs each local rank of `qsync run` runs on. The local pool stands in for separate
// devices, so each rank gets CPUs of its own: disjoint sets of its `threads` CPUs, taken in order
// from the runner's own affinity mask. Unpinned, the ranks' helper threads (the gradient-sync
// thread, Gloo's I/O loop) land on a peer's CPU and the wake-ups of every synchronization point
// cost more: measured here on a 2-rank MLP job, 32.0 ms per step unpinned, 28.5 ms pinned, the
// step's stats all-reduce 1.7-2.4 ms unpinned, 0.3-0.6 ms pinned. When the pool asks for more
// threads than there are CPUs, nothing is pinned and the note says why.
//
//   CpuAssignment a = assign_rank_cpus({1, 1}, affinity_cpus());   // {{0}, {1}} on a 2-CPU machine
//   pin_to_cpus(a.per_rank[r]);                                    // in rank r's child, before exec
#pragma once

#include <string>
#include <vector>

namespace qsync {

struct CpuAssignment {
  std::vector<std::vector<int>> per_rank;  // empty: the ranks are not pinned
  std::string note;                        // why not, when they are not
};

// The CPUs this process may run on (sched_getaffinity), ascending.
std::vector<int> affinity_cpus();

// Disjoint CPU sets for ranks wanting threads_per_rank[r] CPUs each (at least 1), in order of
// `available`; not pinned when they do not all fit.
CpuAssignment assign_rank_cpus(const std::vector<int>& threads_per_rank, const std::vector<int>& available);

// Restricts the calling process to `cpus` (sched_setaffinity); throws std::runtime_error naming
// the CPUs and the system error. An empty list leaves the affinity as it is.
void pin_to_cpus(const std::vector<int>& cpus);

// "0-3,6" for {0, 1, 2, 3, 6}.
std::string cpu_list_string(const std::vector<int>& cpus);

}  // namespace qsync
