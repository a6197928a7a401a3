// File: planner/allocator_dual.cpp
// solve_chain (planner/allocator_solver.h) and the Lagrangian dual that makes it fast.
//
// Relaxing memory and the tracked deadlines (the whole pass and the active earlier buckets') with
// multipliers lm, mu_j >= 0 gives, for any plan that fits, value >= root (allocator_chain.h has
// the formula; the LP relaxation's dual when the multipliers maximize it: fitted by coordinate
// bisection, then projected subgradient ascent). With a known plan of value U:
//   - option fixing: an option whose reduced cost (cost_i(o) - min cost_i) lifts the root above
//     U cannot be in a plan better than U, so it is removed before the DP (the classic variable
//     fixing of multiple-choice knapsack solvers);
//   - state pruning: a state whose value plus the Lagrangian bound of the rest exceeds U is
//     dropped (chain_pass);
//   - staged bounds: the DP is first asked for a plan within 15 %, then 40 %, of the gap between
//     root and U (much stronger fixing and pruning); a stage that finds one has the optimum.
// The known plan: the better of the caller's (the greedy plan) and a local search's
// (allocator_search.cpp). Nothing here removes a plan that could beat U; when nothing beats U,
// U's plan is returned.
#include <algorithm>
#include <cmath>

#include "planner/allocator_chain.h"

namespace qsync {
namespace {

constexpr double INF = std::numeric_limits<double>::infinity();

// The tracked deadlines: leaf 0 (the whole pass, d0) and the active earlier ones, with E_j.
std::vector<double> deadline_slacks(const ChainPrep& prep) {
  const size_t n = prep.deadline.size();
  std::vector<double> e(n, INF);
  for (size_t j = 0; j < n; ++j) {
    const double d = j == 0 ? prep.d0 : prep.deadline[j];
    if (std::isfinite(d)) e[j] = d - prep.min_f_pre[n] - prep.min_b_suf[j];
  }
  return e;
}

// The Lagrangian minimizers' usage: extra bytes and, per tracked deadline, extra seconds.
struct Usage {
  double bytes = 0;
  std::vector<double> seconds;
};

// The bound at (d's multipliers) and the minimizers' usage.
double bound_at(const ChainProblem& pb, const ChainPrep& prep, const ChainDual& d, const std::vector<double>& e,
                Usage* use) {
  const size_t n = e.size();
  double total = 0, forward = 0, bytes = 0;
  std::vector<double> backward(n + 1, 0.0);
  for (size_t i = 0; i < pb.slots.size(); ++i) {
    const ChainOption* best = nullptr;
    double c = INF;
    for (const ChainOption& o : pb.slots[i].options)
      if (const double x = d.cost(pb, prep, i, o); x < c) c = x, best = &o;
    total += c;
    forward += best->forward - prep.min_f[i];
    backward[pb.slots[i].leaf] += best->backward - prep.min_b[i];
    bytes += double(best->memory - prep.min_m[i]);
  }
  if (prep.limited) total -= d.lm * double(prep.memory_slack);
  for (size_t j = 0; j < n; ++j)
    if (d.mu[j] > 0) total -= d.mu[j] * e[j];
  if (use != nullptr) {
    use->bytes = bytes;
    use->seconds.assign(n, 0.0);
    double suffix = 0;
    for (size_t j = n; j-- > 0;) {
      suffix += backward[j];
      use->seconds[j] = forward + suffix;
    }
  }
  return total;
}

}  // namespace

void ChainDual::set_multipliers(double lm_, const std::vector<double>& mu_) {
  lm = lm_;
  mu = mu_;
  w_upto.assign(mu.size(), 0.0);
  double acc = 0;
  for (size_t j = 0; j < mu.size(); ++j) w_upto[j] = acc += mu[j];
  w_all = acc;
}

ChainDual chain_dual(const ChainProblem& pb, const ChainPrep& prep, double target) {
  const size_t n = pb.leaves.size();
  const std::vector<double> e = deadline_slacks(prep);
  ChainDual d;
  d.set_multipliers(0, std::vector<double>(n, 0.0));
  if (n == 0) return d;
  // Coordinate bisection on memory and the whole pass: each multiplier up to where its
  // minimizers stop overusing (the subgradient changes sign).
  auto bisect = [&](bool memory) {
    if (memory ? !prep.limited : !std::isfinite(e[0])) return;
    auto over = [&](double x) {
      ChainDual t = d;
      std::vector<double> mu = d.mu;
      if (!memory) mu[0] = x;
      t.set_multipliers(memory ? x : d.lm, mu);
      Usage u;
      bound_at(pb, prep, t, e, &u);
      return memory ? u.bytes > double(prep.memory_slack) : u.seconds[0] > e[0];
    };
    double x = 0;
    if (over(0)) {
      double lo = 0, hi = 1e-12;
      for (int k = 0; k < 200 && over(hi); ++k) hi *= 4;
      for (int k = 0; k < 60; ++k) (over(0.5 * (lo + hi)) ? lo : hi) = 0.5 * (lo + hi);
      x = hi;
    }
    std::vector<double> mu = d.mu;
    if (!memory) mu[0] = x;
    d.set_multipliers(memory ? x : d.lm, mu);
  };
  for (int round = 0; round < 3; ++round) bisect(true), bisect(false);
  // Projected subgradient ascent over every multiplier, in units scaled to the largest usage so
  // bytes and seconds weigh alike; Polyak steps towards the target (or 5 % above the best).
  double time_scale = 1e-300, byte_scale = 1;
  for (size_t i = 0; i < pb.slots.size(); ++i) {
    double t = 0, m = 0;
    for (const ChainOption& o : pb.slots[i].options)
      t = std::max(t, o.forward + o.backward - prep.min_f[i] - prep.min_b[i]), m = std::max(m, double(o.memory - prep.min_m[i]));
    time_scale += t, byte_scale += m;
  }
  ChainDual best = d;
  best.root = bound_at(pb, prep, d, e, nullptr);
  double theta = 1;
  int stale = 0;
  for (int it = 0; it < 300 && theta > 1e-4; ++it) {
    Usage u;
    const double value = bound_at(pb, prep, d, e, &u);
    if (value > best.root + 1e-12 * std::max(1.0, std::abs(best.root))) best = d, best.root = value, stale = 0;
    else if (++stale >= 15) theta *= 0.5, stale = 0;
    std::vector<double> g(n, 0.0);
    double norm = 0, gm = 0;
    for (size_t j = 0; j < n; ++j) {
      if (!std::isfinite(e[j])) continue;
      g[j] = (u.seconds[j] - e[j]) / time_scale;
      if (d.mu[j] <= 0 && g[j] < 0) g[j] = 0;
      norm += g[j] * g[j];
    }
    if (prep.limited) {
      gm = (u.bytes - double(prep.memory_slack)) / byte_scale;
      if (d.lm <= 0 && gm < 0) gm = 0;
      norm += gm * gm;
    }
    if (norm <= 0) break;  // no constraint overused or underused with weight: optimal multipliers
    const double goal = std::isfinite(target) ? target : best.root + std::max(1e-9, 0.05 * std::abs(best.root));
    const double step = theta * std::max(goal - value, 1e-12) / norm;
    std::vector<double> mu = d.mu;
    for (size_t j = 0; j < n; ++j) mu[j] = std::max(0.0, mu[j] + step * g[j] / time_scale);
    d.set_multipliers(std::max(0.0, d.lm + step * gm / byte_scale), mu);
  }
  d = best;
  // The tables of the state bound (processing order: leaves backward).
  d.rest.assign(pb.slots.size(), 0.0);
  d.kappa.assign(pb.slots.size(), 0.0);
  double acc = 0, kappa = 0;
  for (size_t k = prep.order.size(); k-- > 0;) {
    const size_t i = prep.order[k];
    d.rest[i] = acc;
    double c = INF;
    for (const ChainOption& o : pb.slots[i].options) c = std::min(c, d.cost(pb, prep, i, o));
    acc += c;
  }
  for (size_t i : prep.order) d.kappa[i] = kappa += prep.min_r[i] - prep.min_f[i] - prep.min_b[i];
  d.mu_after.assign(n, 0.0);
  d.mu_e_upto.assign(n, 0.0);
  for (size_t j = n - 1; j-- > 0;) d.mu_after[j] = d.mu_after[j + 1] + d.mu[j + 1];
  for (size_t j = 0; j < n; ++j) d.mu_e_upto[j] = (j > 0 ? d.mu_e_upto[j - 1] : 0.0) + (d.mu[j] > 0 ? d.mu[j] * e[j] : 0.0);
  return d;
}

ChainResult solve_chain(const ChainProblem& pb) {
  const ChainPrep prep = chain_prepare(pb);
  if (prep.infeasible) {
    ChainResult out;
    out.two_time_dimensions = prep.two_time_dimensions;
    return out;
  }
  const ChainDual dual = chain_dual(pb, prep, pb.upper_bound);
  double bound = pb.upper_bound;
  ChainResult known;
  if (const std::vector<int> c = chain_local_search(pb, prep, dual); !c.empty()) {
    double v = 0;
    int64_t mem = prep.memory_floor;
    for (size_t i = 0; i < c.size(); ++i) v += pb.slots[i].options[size_t(c[i])].value, mem += pb.slots[i].options[size_t(c[i])].memory - prep.min_m[i];
    if (v < bound) {
      bound = v;
      known.feasible = true;
      known.choice = c;
      known.value = v;
      known.memory = mem;
    }
  }
  if (!std::isfinite(bound)) return chain_pass(pb, prep, nullptr);  // (rare: no plan found to beat)

  // Staged bounds: first ask for a plan within a fraction of the gap between the root bound and
  // the known plan (strong fixing and pruning: cheap), widening to the known plan itself. A stage
  // that finds a plan has found the optimum (within the gap): every plan at or below its bound
  // survives it. Each stage fixes options out against its bound, then runs the exact pass.
  ChainResult r;
  for (double fraction : {0.15, 0.4, 1.0}) {
    const double stage = fraction < 1 ? dual.root + fraction * (bound - dual.root) : bound;
    if (fraction < 1 && !(stage < bound)) continue;
    const double tol = 1e-9 * std::max(1.0, std::abs(stage));
    ChainProblem reduced = pb;
    reduced.upper_bound = stage;
    std::vector<std::vector<int>> index(pb.slots.size());
    bool empty = false;
    for (size_t i = 0; i < pb.slots.size(); ++i) {
      double least = INF;
      for (const ChainOption& o : pb.slots[i].options) least = std::min(least, dual.cost(pb, prep, i, o));
      reduced.slots[i].options.clear();
      for (size_t o = 0; o < pb.slots[i].options.size(); ++o) {
        const ChainOption& opt = pb.slots[i].options[o];
        if (dual.root + (dual.cost(pb, prep, i, opt) - least) > stage + tol) continue;
        reduced.slots[i].options.push_back(opt);
        index[i].push_back(int(o));
      }
      empty = empty || reduced.slots[i].options.empty();
    }
    if (empty) continue;  // the root bound is above this stage: nothing here
    const ChainPrep reduced_prep = chain_prepare(reduced);
    const ChainDual reduced_dual = chain_dual(reduced, reduced_prep, stage);
    const int64_t states = r.states;
    r = chain_pass(reduced, reduced_prep, &reduced_dual);
    r.states += states;
    r.two_time_dimensions = prep.two_time_dimensions;
    if (r.gave_up) break;
    if (r.feasible) {
      for (size_t i = 0; i < r.choice.size(); ++i) r.choice[i] = index[i][size_t(r.choice[i])];
      return r;
    }
  }
  if (known.feasible) {
    known.states += r.states;
    known.gave_up = r.gave_up;
    return known;
  }
  return r;  // nothing beats the caller's plan (or nothing is feasible)
}

}  // namespace qsync
