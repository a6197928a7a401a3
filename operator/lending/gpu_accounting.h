// File: operator/lending/gpu_accounting.h
// Which GPUs a job may borrow, counted as the scheduler counts them: per node, allocatable
// nvidia.com/gpu minus what the pods bound to it request (pods that are not the job's own and
// not finished; terminating pods still hold theirs). A workload's pods that wait unbound for
// capacity, and its replicas not created yet, are owed first: they are taken off the nodes
// last in name order, so the job keeps the nodes that come first. Pure: the reconciler fills
// the observations from Nodes and Pods, the simulation from its model.
//
//   const auto free = free_gpus(nodes, pods);                         // node -> free GPUs
//   const auto ranks = borrowed_ranks(entry_nodes, free, budget, 1, 8);  // node -> ranks
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace qsync::lending {

struct NodeObservation {
  std::string name;
  bool schedulable = true;        // not cordoned, Ready
  bool advertises_gpus = false;   // status.allocatable has nvidia.com/gpu
  int64_t allocatable_gpus = 0;
};

struct PodObservation {
  std::string node;          // spec.nodeName ("" while unbound)
  int64_t gpus = 0;          // nvidia.com/gpu requested (limits, as extended resources are)
  bool finished = false;     // Succeeded or Failed: holds nothing
  bool job_pod = false;      // one of the borrowing job's own workers
};

// Free GPUs of each schedulable node that advertises GPUs (the job's own pods excluded).
std::map<std::string, int64_t> free_gpus(const std::vector<NodeObservation>& nodes, const std::vector<PodObservation>& pods);

// Ranks of `gpus_per_rank` GPUs the job may place on `nodes` (names, any order): at most
// `budget_gpus` GPUs after `owed_gpus` (unbound workload pods, replicas to come) are left free
// on the last nodes by name, and at most `max_ranks` ranks. Nodes get ranks in name order.
std::map<std::string, int64_t> borrowed_ranks(const std::vector<std::string>& nodes, const std::map<std::string, int64_t>& free,
                                              int64_t budget_gpus, int64_t owed_gpus, int64_t gpus_per_rank, int64_t max_ranks);

}  // namespace qsync::lending
