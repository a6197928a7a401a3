// File: runner/cpu_pinning.cpp
// Disjoint CPU sets for local ranks (see cpu_pinning.h).
#include "runner/cpu_pinning.h"

#include <sched.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace qsync {

std::vector<int> affinity_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

CpuAssignment assign_rank_cpus(const std::vector<int>& threads_per_rank, const std::vector<int>& available) {
  CpuAssignment a;
  size_t wanted = 0;
  for (int t : threads_per_rank) wanted += size_t(t < 1 ? 1 : t);
  if (wanted > available.size()) {
    a.note = "ranks not pinned to CPUs: the pool asks for " + std::to_string(wanted) + " threads and this process may use " +
             std::to_string(available.size()) + " CPUs (" + cpu_list_string(available) +
             "); lower spec.pool.local[].threads to give each rank CPUs of its own";
    return a;
  }
  size_t next = 0;
  for (int t : threads_per_rank) {
    std::vector<int>& cpus = a.per_rank.emplace_back();
    for (int i = 0; i < (t < 1 ? 1 : t); ++i) cpus.push_back(available[next++]);
  }
  return a;
}

void pin_to_cpus(const std::vector<int>& cpus) {
  if (cpus.empty()) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) {
    if (c < 0 || c >= CPU_SETSIZE) throw std::runtime_error("cannot pin to CPU " + std::to_string(c) + ": out of range");
    CPU_SET(c, &set);
  }
  if (sched_setaffinity(0, sizeof set, &set) != 0)
    throw std::runtime_error("cannot pin to CPUs " + cpu_list_string(cpus) + ": " + std::strerror(errno));
}

std::string cpu_list_string(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out.push_back(',');
    out.append(std::to_string(cpus[i]));
    if (j > i) {
      out.push_back('-');
      out.append(std::to_string(cpus[j]));
    }
    i = j + 1;
  }
  return out.empty() ? "none" : out;
}

}  // namespace qsync
