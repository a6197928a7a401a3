// File: planner/allocator_dual.cpp
// solve_chain (planner/allocator_solver.h) and the Lagrangian dual that makes it fast.
//
// Relaxing memory and whole-pass time with multipliers lm, lt >= 0 gives, for any plan that
// fits, value >= root = sum_i min_o cost_i(o) - lm * memory slack - lt * time slack, where
// cost_i(o) = value + lm * extra bytes + lt * extra seconds (the LP relaxation's dual when the
// multipliers maximize it; fitted by coordinate bisection on the subgradients). With a known
// plan of value U:
//   - option fixing: an option whose reduced cost (cost_i(o) - min cost_i) lifts the root above
//     U cannot be in a plan better than U, so it is removed before the DP (the classic variable
//     fixing of multiple-choice knapsack solvers);
//   - state pruning: a state whose value plus the remaining slots' bound exceeds U is dropped.
// The known plan: the caller's (the greedy plan) and, under a memory budget, the best plan of a
// fast pass that prices memory at lm (x 1, 1.5, 3, 10) instead of constraining it. Either only
// removes what cannot beat U; when nothing beats U, U's plan is returned.
#include <algorithm>
#include <cmath>

#include "planner/allocator_chain.h"

namespace qsync {
namespace {

constexpr double INF = std::numeric_limits<double>::infinity();

// Per slot, the least cost at (lm, lt); the minimizers' extra bytes and seconds.
double least_costs(const ChainProblem& pb, const ChainPrep& prep, double lm, double lt, double& bytes, double& seconds) {
  ChainDual d;
  d.lm = lm;
  d.lt = lt;
  double total = 0;
  bytes = seconds = 0;
  for (size_t i = 0; i < pb.slots.size(); ++i) {
    const ChainOption* best = nullptr;
    double c = INF;
    for (const ChainOption& o : pb.slots[i].options)
      if (const double x = d.cost(pb, prep, i, o); x < c) c = x, best = &o;
    bytes += double(best->memory - prep.min_m[i]);
    seconds += best->forward + best->backward - prep.min_r[i];
    total += c;
  }
  return total;
}

}  // namespace

ChainDual chain_dual(const ChainProblem& pb, const ChainPrep& prep) {
  ChainDual d;
  const double time_slack = std::max(prep.slack, 0.0);
  auto bisect = [&](bool memory) {
    const double slack = memory ? double(prep.memory_slack) : time_slack;
    double& l = memory ? d.lm : d.lt;
    auto over = [&](double x) {  // the subgradient's sign: the minimizers use more than the slack
      double bytes = 0, seconds = 0;
      least_costs(pb, prep, memory ? x : d.lm, memory ? d.lt : x, bytes, seconds);
      return (memory ? bytes : seconds) > slack;
    };
    if (!over(0)) {
      l = 0;
      return;
    }
    double lo = 0, hi = 1e-12;
    for (int k = 0; k < 200 && over(hi); ++k) hi *= 4;
    for (int k = 0; k < 60; ++k) (over(0.5 * (lo + hi)) ? lo : hi) = 0.5 * (lo + hi);
    l = hi;
  };
  for (int round = 0; round < 4; ++round) {
    if (prep.limited) bisect(true);
    bisect(false);
  }
  double bytes = 0, seconds = 0;
  d.root = least_costs(pb, prep, d.lm, d.lt, bytes, seconds) - d.lm * double(prep.limited ? prep.memory_slack : 0) -
           d.lt * time_slack;
  d.rest.assign(pb.slots.size(), 0.0);
  double acc = 0;
  for (size_t k = prep.order.size(); k-- > 0;) {
    const size_t i = prep.order[k];
    d.rest[i] = acc;
    double c = INF;
    for (const ChainOption& o : pb.slots[i].options) c = std::min(c, d.cost(pb, prep, i, o));
    acc += c;
  }
  return d;
}

ChainResult solve_chain(const ChainProblem& pb) {
  const ChainPrep prep = chain_prepare(pb);
  if (prep.infeasible) {
    ChainResult out;
    out.two_time_dimensions = prep.two_time_dimensions;
    return out;
  }
  const ChainDual dual = chain_dual(pb, prep);
  double bound = pb.upper_bound;
  ChainResult known;
  if (prep.limited) {
    for (double scale : {1.0, 1.5, 3.0, 10.0}) {
      if (dual.lm <= 0 && scale > 1) break;
      ChainProblem priced = pb;
      priced.memory_budget = -1;
      priced.upper_bound = INF;
      for (size_t i = 0; i < priced.slots.size(); ++i)
        for (ChainOption& o : priced.slots[i].options) o.value += scale * dual.lm * double(o.memory - prep.min_m[i]);
      ChainResult r = chain_pass(priced, chain_prepare(priced), nullptr);
      if (!r.feasible) break;  // no plan meets the deadlines: the exact pass finds none either
      if (r.memory > pb.memory_budget) continue;
      r.value = 0;
      for (size_t i = 0; i < r.choice.size(); ++i) r.value += pb.slots[i].options[size_t(r.choice[i])].value;
      if (r.value < bound) bound = r.value, known = r;
      break;
    }
  }
  if (!std::isfinite(bound)) return chain_pass(pb, prep, nullptr);

  // Option fixing against the bound, then the exact pass on what is left.
  const double tol = 1e-9 * std::max(1.0, std::abs(bound));
  ChainProblem reduced = pb;
  reduced.upper_bound = bound;
  std::vector<std::vector<int>> index(pb.slots.size());
  for (size_t i = 0; i < pb.slots.size(); ++i) {
    double least = INF;
    for (const ChainOption& o : pb.slots[i].options) least = std::min(least, dual.cost(pb, prep, i, o));
    reduced.slots[i].options.clear();
    for (size_t o = 0; o < pb.slots[i].options.size(); ++o) {
      const ChainOption& opt = pb.slots[i].options[o];
      if (dual.root + (dual.cost(pb, prep, i, opt) - least) > bound + tol) continue;
      reduced.slots[i].options.push_back(opt);
      index[i].push_back(int(o));
    }
  }
  for (const ChainSlot& s : reduced.slots)
    if (s.options.empty()) return known;  // rounding put the root above the bound: the known plan is optimal
  const ChainPrep reduced_prep = chain_prepare(reduced);
  const ChainDual reduced_dual = chain_dual(reduced, reduced_prep);
  ChainResult r = chain_pass(reduced, reduced_prep, &reduced_dual);
  r.two_time_dimensions = prep.two_time_dimensions;
  if (r.feasible) {
    for (size_t i = 0; i < r.choice.size(); ++i) r.choice[i] = index[i][size_t(r.choice[i])];
    return r;
  }
  if (known.feasible) {
    known.states += r.states;
    return known;
  }
  return r;  // nothing beats the caller's plan (or nothing is feasible)
}

}  // namespace qsync
