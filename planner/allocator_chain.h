// File: planner/allocator_chain.h
// The parts of the chain DP (planner/allocator_solver.h), internal to the solver's two files:
//   allocator_solver.cpp  chain_prepare (per-slot minima, deadline folding, the per-leaf bound
//                         on backward-order time, slacks) and chain_pass (one DP pass);
//   allocator_dual.cpp    the Lagrangian dual (bounds for pruning and for fixing options out)
//                         and solve_chain, which strings the passes together;
//   allocator_search.cpp  a local search for a good known plan.
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
  std::vector<double> min_r, min_f, min_b;  // per slot: least forward + backward, forward, backward
  std::vector<int64_t> min_m;        // per slot: least bytes
  std::vector<double> min_f_pre;     // per leaf j: least forward seconds of leaves < j
  std::vector<double> min_b_suf;     // per leaf j: least backward seconds of leaves >= j
  double d0 = 0;                     // the whole-pass deadline (leaf 0's, with the folded ones)
  std::vector<double> deadline;      // per leaf: the deadlines still checked with the slack (else +inf)
  std::vector<double> u;             // per leaf j: bound on forward + backward of leaves >= j
  std::vector<size_t> order;         // slots in processing order (leaves backward)
  double slack = 0;                  // whole-pass seconds above the fastest plan allowed
  double tol = 0;
  bool two_time_dimensions = false;
};

ChainPrep chain_prepare(const ChainProblem& pb);

// The Lagrangian relaxation of memory and of the deadlines the DP tracks (the whole pass at leaf
// 0 and the active earlier ones): with multipliers lm, mu_j >= 0, for any plan that fits,
//   value >= sum_i cost_i(choice) - lm * memory slack - sum_j mu_j * E_j,
// cost_i(o) = value + lm * extra bytes + (forward - least) * sum_j mu_j
//           + (backward - least) * sum_{j <= leaf of i} mu_j,
// E_j = deadline_j - least forward of all leaves - least backward of leaves >= j.
struct ChainDual {
  double lm = 0;
  std::vector<double> mu;     // per leaf: its deadline's multiplier (0 where none is tracked)
  std::vector<double> w_upto;  // per leaf l: sum of mu_j over j <= l
  double w_all = 0;
  double root = 0;             // the bound itself: no plan that fits has a lower value
  std::vector<double> rest;    // per slot: least costs of the slots processed after it
  // The bound of a DP state at leaf c (allocator_solver.cpp): multipliers of deadlines past
  // (j > c), sum of mu_j * E_j over j <= c, and per slot the sum over slots processed up to it of
  // (least forward + backward) - least forward - least backward.
  std::vector<double> mu_after, mu_e_upto, kappa;
  double cost(const ChainProblem& pb, const ChainPrep& prep, size_t slot, const ChainOption& o) const {
    return o.value + lm * double(o.memory - prep.min_m[slot]) + (o.forward - prep.min_f[slot]) * w_all +
           (o.backward - prep.min_b[slot]) * w_upto[pb.slots[slot].leaf];
  }
  void set_multipliers(double lm_, const std::vector<double>& mu_);  // recomputes w_upto, w_all
};

// Fits the multipliers (coordinate bisection on memory and the whole pass, then a projected
// subgradient ascent over all of them, Polyak steps towards `target`, a known plan's value or
// +inf) and fills the bound's tables.
ChainDual chain_dual(const ChainProblem& pb, const ChainPrep& prep, double target);

// A good plan fast (empty when none of its starts fits): the Lagrangian minimizers, then moves
// of one slot or of two slots at once while the value drops and every deadline and memory hold.
std::vector<int> chain_local_search(const ChainProblem& pb, const ChainPrep& prep, const ChainDual& dual);

// One DP pass; with `dual` (and a finite pb.upper_bound) states that cannot beat it are pruned.
ChainResult chain_pass(const ChainProblem& pb, const ChainPrep& prep, const ChainDual* dual);

}  // namespace qsync
