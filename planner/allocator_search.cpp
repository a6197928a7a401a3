// File: planner/allocator_search.cpp
// chain_local_search (planner/allocator_chain.h): a good plan for the chain DP to beat.
//
// Start: the Lagrangian minimizers (least value + priced bytes and seconds per slot), with the
// multipliers raised until the plan fits. Then, while the value drops, the best move of one slot
// or of two slots at once (one that gains value and one that frees the time or memory it takes)
// that keeps every deadline and the memory budget. Deadlines are checked in O(1) per move: with
// slack_j = deadline_j - (F + B_suffix(j)) per leaf, a change of df forward and db backward
// seconds in a slot of leaf l fits iff df + db <= min slack over leaves <= l and df <= min slack
// over leaves > l (a range-minimum table; two slots split the leaves into three ranges).
#include <algorithm>
#include <cmath>

#include "planner/allocator_chain.h"

namespace qsync {
namespace {

constexpr double INF = std::numeric_limits<double>::infinity();

class RangeMin {
 public:
  void build(const std::vector<double>& x) {
    t_.assign(1, x);
    for (size_t w = 1; 2 * w <= x.size(); w *= 2) {
      const std::vector<double>& prev = t_.back();
      std::vector<double> next(x.size() - 2 * w + 1);
      for (size_t i = 0; i < next.size(); ++i) next[i] = std::min(prev[i], prev[i + w]);
      t_.push_back(std::move(next));
    }
  }
  // min over [lo, hi]; +inf when empty.
  double min(size_t lo, size_t hi) const {
    if (lo > hi || hi >= t_[0].size()) return INF;
    size_t k = 0;
    while ((size_t(2) << k) <= hi - lo + 1) ++k;
    return std::min(t_[k][lo], t_[k][hi + 1 - (size_t(1) << k)]);
  }

 private:
  std::vector<std::vector<double>> t_;
};

struct Plan {
  const ChainProblem& pb;
  const ChainPrep& prep;
  std::vector<int> c;
  std::vector<double> slack;  // per leaf: deadline - backward end (+inf without a deadline)
  int64_t memory = 0;         // extra bytes

  const ChainOption& at(size_t i, int o) const { return pb.slots[i].options[size_t(o)]; }
  void refresh() {
    const size_t n = pb.leaves.size();
    std::vector<double> bwd(n);
    double f = 0;
    memory = 0;
    for (size_t j = 0; j < n; ++j) f += pb.leaves[j].forward, bwd[j] = pb.leaves[j].backward;
    for (size_t i = 0; i < c.size(); ++i) {
      f += at(i, c[i]).forward;
      bwd[pb.slots[i].leaf] += at(i, c[i]).backward;
      memory += at(i, c[i]).memory - prep.min_m[i];
    }
    slack.assign(n, INF);
    double end = f;
    for (size_t j = n; j-- > 0;) {
      end += bwd[j];
      slack[j] = pb.leaves[j].deadline - end;
    }
  }
  bool feasible() const {
    if (prep.limited && memory > prep.memory_slack) return false;
    return std::all_of(slack.begin(), slack.end(), [&](double s) { return s >= -prep.tol; });
  }
};

}  // namespace

std::vector<int> chain_local_search(const ChainProblem& pb, const ChainPrep& prep, const ChainDual& dual) {
  Plan plan{pb, prep, {}, {}, 0};
  bool found = false;
  for (double raise : {1.0, 1.02, 1.05, 1.1, 1.25, 1.5, 2.0, 4.0, 16.0, 0.0}) {
    ChainDual d = dual;
    std::vector<double> mu = dual.mu;
    if (dual.w_all <= 0 && !mu.empty()) mu[0] = 1e-9;  // no time price: a small one to break ties
    for (double& x : mu) x *= raise;
    d.set_multipliers(dual.lm * raise, mu);
    plan.c.assign(pb.slots.size(), 0);
    for (size_t i = 0; i < pb.slots.size(); ++i) {
      for (size_t o = 1; o < pb.slots[i].options.size(); ++o) {
        const ChainOption &x = pb.slots[i].options[o], &y = plan.at(i, plan.c[i]);
        // raise 0 (the last start): the fastest choice of each slot, for the least memory on ties.
        const bool better = raise > 0 ? d.cost(pb, prep, i, x) < d.cost(pb, prep, i, y)
                                      : x.forward + x.backward < y.forward + y.backward ||
                                            (x.forward + x.backward == y.forward + y.backward && x.memory < y.memory);
        if (better) plan.c[i] = int(o);
      }
    }
    plan.refresh();
    if ((found = plan.feasible())) break;
  }
  if (!found) return {};
  const size_t n = pb.leaves.size();
  const double tol = prep.tol;
  const double memory_cap = prep.limited ? double(prep.memory_slack) : INF;
  RangeMin range;
  for (int pass = 0; pass < 64; ++pass) {
    range.build(plan.slack);
    double best = 1e-12;
    size_t bi = 0, bk = 0;
    int bo = -1, bp = -1;
    for (size_t i = 0; i < plan.c.size(); ++i) {
      const size_t li = pb.slots[i].leaf;
      const ChainOption& now_i = plan.at(i, plan.c[i]);
      for (int o = 0; o < int(pb.slots[i].options.size()); ++o) {
        if (o == plan.c[i]) continue;
        const ChainOption& to_i = plan.at(i, o);
        const double gain = now_i.value - to_i.value;
        if (gain <= best) continue;
        const double df = to_i.forward - now_i.forward, db = to_i.backward - now_i.backward;
        const double dm = double(to_i.memory - now_i.memory);
        if (df + db <= range.min(0, li) + tol && df <= range.min(li + 1, n - 1) + tol && double(plan.memory) + dm <= memory_cap)
          best = gain, bi = i, bo = o, bp = -1;
        for (size_t k = 0; k < plan.c.size(); ++k) {  // with a second move that frees what it takes
          if (k == i) continue;
          const size_t lk = pb.slots[k].leaf;
          const ChainOption& now_k = plan.at(k, plan.c[k]);
          for (int p = 0; p < int(pb.slots[k].options.size()); ++p) {
            if (p == plan.c[k]) continue;
            const ChainOption& to_k = plan.at(k, p);
            if (gain + now_k.value - to_k.value <= best) continue;
            if (double(plan.memory) + dm + double(to_k.memory - now_k.memory) > memory_cap) continue;
            const double f2 = df + to_k.forward - now_k.forward, dbk = to_k.backward - now_k.backward;
            const size_t lo = std::min(li, lk), hi = std::max(li, lk);
            const double b_hi = li == hi ? db : dbk;  // the move in the later leaf
            if (f2 + db + dbk <= range.min(0, lo) + tol && f2 + b_hi <= range.min(lo + 1, hi) + tol &&
                f2 <= range.min(hi + 1, n - 1) + tol)
              best = gain + now_k.value - to_k.value, bi = i, bo = o, bk = k, bp = p;
          }
        }
      }
    }
    if (bo < 0) break;
    plan.c[bi] = bo;
    if (bp >= 0) plan.c[bk] = bp;
    plan.refresh();
  }
  return plan.c;
}

}  // namespace qsync
