// File: planner/allocator_chain.h
// The parts of the chain DP (planner/allocator_solver.h), internal to the solver's two files:
//   allocator_solver.cpp  chain_prepare (per-slot minima, deadline folding, the per-leaf bound
//                         on backward-order time, slacks) and chain_pass (one DP pass);
//   allocator_dual.cpp    the Lagrangian dual (bounds for pruning and for fixing options out)
//                         and solve_chain, which strings the passes together.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "planner/allocator_solver.h"

namespace qsync {

struct ChainPrep {
  bool infeasible = false;  // memory or the whole-pass deadline cannot be met at all
  int bins = 0;
  bool limited = false;      // a memory budget applies
  int64_t memory_floor = 0;  // fixed bytes + every slot's least
  int64_t memory_slack = 0;  // budget - floor
  std::vector<double> min_r, min_f;  // per slot: least forward + backward, least forward
  std::vector<int64_t> min_m;        // per slot: least bytes
  std::vector<double> min_f_pre;     // per leaf j: least forward seconds of leaves < j
  std::vector<double> deadline;      // per leaf: the deadlines still checked with the slack (else +inf)
  std::vector<double> u;             // per leaf j: bound on forward + backward of leaves >= j
  std::vector<size_t> order;         // slots in processing order (leaves backward)
  double slack = 0;                  // whole-pass seconds above the fastest plan allowed
  double tol = 0;
  bool two_time_dimensions = false;
};

ChainPrep chain_prepare(const ChainProblem& pb);

// Multipliers of the Lagrangian relaxation of memory and whole-pass time, and per slot the sum
// of the least Lagrangian costs of the slots processed after it.
struct ChainDual {
  double lm = 0, lt = 0;
  double root = 0;  // the bound at the root: a lower bound on any feasible plan's value
  std::vector<double> rest;
  double cost(const ChainProblem& pb, const ChainPrep& prep, size_t slot, const ChainOption& o) const {
    return o.value + lm * double(o.memory - prep.min_m[slot]) + lt * (o.forward + o.backward - prep.min_r[slot]);
  }
};

ChainDual chain_dual(const ChainProblem& pb, const ChainPrep& prep);

// One DP pass; with `dual` (and a finite pb.upper_bound) states that cannot beat it are pruned.
ChainResult chain_pass(const ChainProblem& pb, const ChainPrep& prep, const ChainDual* dual);

}  // namespace qsync
