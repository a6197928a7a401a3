// File: planner/allocator_solver.cpp
// The chain DP of planner/allocator_solver.h, one pass: preparation (per-slot minima, deadline
// folding, the per-leaf bound on backward-order time), the state expansion over slots, and
// Pareto pruning. allocator_dual.cpp holds the bounds and solve_chain.
#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>

#include "planner/allocator_chain.h"

namespace qsync {
namespace {

constexpr double INF = std::numeric_limits<double>::infinity();

struct State {
  double r = 0;    // the partial plan's forward + backward seconds above the fastest choices
  double s = INF;  // forward seconds the earlier leaves may still take (exact)
  int64_t m = 0;   // bytes above the least-memory choices (exact)
  double v = 0;
  int64_t bin = 0;  // r's bin
  int32_t parent = -1;
  int32_t option = -1;
};

// Drops every state dominated by another with bin <=, s >=, m <= and v <=.
void prune(std::vector<State>& st) {
  if (st.size() < 2) return;
  bool s_varies = false, m_varies = false;
  for (const State& x : st) {
    s_varies = s_varies || x.s != st[0].s;
    m_varies = m_varies || x.m != st[0].m;
  }
  size_t kept = 0;
  if (s_varies && m_varies) {
    // Two exact dimensions. In order of value, a state is dominated iff a kept one has bin <=,
    // m <= and s >=: a Fenwick tree over the (compressed) bins whose nodes hold staircases
    // m -> the largest s at that m or less.
    std::sort(st.begin(), st.end(), [](const State& a, const State& b) {
      if (a.v != b.v) return a.v < b.v;
      if (a.bin != b.bin) return a.bin < b.bin;
      if (a.s != b.s) return a.s > b.s;
      if (a.m != b.m) return a.m < b.m;
      return a.r < b.r;
    });
    std::vector<int64_t> bins;
    for (const State& x : st) bins.push_back(x.bin);
    std::sort(bins.begin(), bins.end());
    bins.erase(std::unique(bins.begin(), bins.end()), bins.end());
    std::vector<std::map<int64_t, double>> tree(bins.size() + 1);
    for (size_t i = 0; i < st.size(); ++i) {
      const State& x = st[i];
      const size_t b = size_t(std::lower_bound(bins.begin(), bins.end(), x.bin) - bins.begin()) + 1;
      bool dominated = false;
      for (size_t k = b; k > 0 && !dominated; k -= k & (~k + 1)) {
        auto it = tree[k].upper_bound(x.m);
        dominated = it != tree[k].begin() && std::prev(it)->second >= x.s;
      }
      if (dominated) continue;
      for (size_t k = b; k < tree.size(); k += k & (~k + 1)) {
        std::map<int64_t, double>& node = tree[k];
        auto it = node.upper_bound(x.m);
        if (it != node.begin() && std::prev(it)->second >= x.s) continue;
        auto at = node.insert_or_assign(x.m, x.s).first;
        for (auto next = std::next(at); next != node.end() && next->second <= x.s;) next = node.erase(next);
      }
      st[kept++] = x;
    }
    st.resize(kept);
    return;
  }
  // One exact dimension (key: smaller is better) or none: a staircase key -> least value.
  auto key = [&](const State& x) { return s_varies ? -x.s : double(x.m); };
  std::sort(st.begin(), st.end(), [&](const State& a, const State& b) {
    if (a.bin != b.bin) return a.bin < b.bin;
    if (key(a) != key(b)) return key(a) < key(b);
    if (a.v != b.v) return a.v < b.v;
    return a.r < b.r;
  });
  std::map<double, double> stair;
  for (size_t i = 0; i < st.size(); ++i) {
    const double k = key(st[i]), v = st[i].v;
    auto it = stair.upper_bound(k);
    if (it != stair.begin() && std::prev(it)->second <= v) continue;
    auto at = stair.insert_or_assign(k, v).first;
    for (auto next = std::next(at); next != stair.end() && next->second >= v;) next = stair.erase(next);
    st[kept++] = st[i];
  }
  st.resize(kept);
}

}  // namespace

int chain_default_bins(std::size_t slots) { return int(std::clamp<std::size_t>(200 * slots, 2000, 100000)); }

ChainPrep chain_prepare(const ChainProblem& pb) {
  ChainPrep p;
  const size_t n = pb.leaves.size();
  p.bins = pb.bins > 0 ? pb.bins : chain_default_bins(pb.slots.size());
  p.min_r.assign(pb.slots.size(), INF);
  p.min_f.assign(pb.slots.size(), INF);
  p.min_b.assign(pb.slots.size(), INF);
  p.min_m.assign(pb.slots.size(), std::numeric_limits<int64_t>::max());
  std::vector<double> leaf_r(n), leaf_f(n), leaf_b(n);
  std::vector<bool> has_slot(n, false);
  for (size_t j = 0; j < n; ++j) {
    leaf_r[j] = pb.leaves[j].forward + pb.leaves[j].backward;
    leaf_f[j] = pb.leaves[j].forward;
    leaf_b[j] = pb.leaves[j].backward;
    p.memory_floor += pb.leaves[j].memory;
  }
  double r_slowest = 0;
  for (size_t i = 0; i < pb.slots.size(); ++i) {
    const ChainSlot& s = pb.slots[i];
    if (s.leaf >= n || s.options.empty()) throw std::invalid_argument("chain slot " + std::to_string(i) + " is malformed");
    double slowest = 0;
    for (const ChainOption& o : s.options) {
      p.min_r[i] = std::min(p.min_r[i], o.forward + o.backward);
      p.min_f[i] = std::min(p.min_f[i], o.forward);
      p.min_b[i] = std::min(p.min_b[i], o.backward);
      p.min_m[i] = std::min(p.min_m[i], o.memory);
      slowest = std::max(slowest, o.forward + o.backward);
    }
    r_slowest += slowest;
    leaf_r[s.leaf] += p.min_r[i];
    leaf_f[s.leaf] += p.min_f[i];
    leaf_b[s.leaf] += p.min_b[i];
    p.memory_floor += p.min_m[i];
    has_slot[s.leaf] = true;
  }
  for (size_t j = n; j-- > 0;)
    for (size_t i = pb.slots.size(); i-- > 0;)
      if (pb.slots[i].leaf == j) p.order.push_back(i);
  p.limited = pb.memory_budget >= 0;
  p.memory_slack = p.limited ? pb.memory_budget - p.memory_floor : 0;

  // Fold deadlines into leaf 0's whole-pass bound where every leaf before is fixed; keep the
  // others unless the whole-pass bound implies them (T <= d0 <= deadline + least backward before).
  p.min_f_pre.assign(n + 1, 0.0);
  std::vector<double> min_b_pre(n + 1, 0.0);
  double fixed_b = 0, d0 = INF, r_fastest = 0;
  bool all_fixed_before = true;
  for (size_t j = 0; j < n; ++j) {
    p.min_f_pre[j + 1] = p.min_f_pre[j] + leaf_f[j];
    min_b_pre[j + 1] = min_b_pre[j] + leaf_b[j];
    if (all_fixed_before) d0 = std::min(d0, pb.leaves[j].deadline + fixed_b);
    fixed_b += pb.leaves[j].backward;
    all_fixed_before = all_fixed_before && !has_slot[j];
    r_fastest += leaf_r[j];
    r_slowest += pb.leaves[j].forward + pb.leaves[j].backward;
  }
  p.d0 = d0;
  p.min_b_suf.assign(n + 1, 0.0);
  for (size_t j = n; j-- > 0;) p.min_b_suf[j] = p.min_b_suf[j + 1] + leaf_b[j];
  p.deadline.assign(n, INF);
  all_fixed_before = true;
  for (size_t j = 0; j < n; ++j) {
    const double d = pb.leaves[j].deadline;
    if (!all_fixed_before && d < INF && d0 > d + min_b_pre[j]) p.deadline[j] = d, p.two_time_dimensions = true;
    all_fixed_before = all_fixed_before && !has_slot[j];
  }
  p.tol = 1e-12 * std::max(1.0, std::abs(std::isfinite(d0) ? d0 : r_slowest));
  p.u.assign(n, INF);
  for (size_t j = 0; j < n; ++j) {
    const double own = (j == 0 ? d0 : p.deadline[j]) - p.min_f_pre[j];
    p.u[j] = std::min(j == 0 ? INF : p.u[j - 1] - leaf_r[j - 1], own);
  }
  p.slack = (n > 0 && std::isfinite(p.u[0]) ? p.u[0] : r_slowest) - r_fastest;
  p.infeasible = p.memory_slack < 0 || p.slack < -p.tol;
  return p;
}

ChainResult chain_pass(const ChainProblem& pb, const ChainPrep& prep, const ChainDual* dual) {
  ChainResult out;
  out.two_time_dimensions = prep.two_time_dimensions;
  if (prep.infeasible) return out;
  const size_t n = pb.leaves.size();
  const int bins = prep.bins;
  const double width = prep.slack > 0 ? prep.slack / bins : 1.0;
  const double tol = prep.tol;
  // The bound test allows a state's stand-in its drift (slots x width) in time.
  const bool bounded = dual != nullptr && std::isfinite(pb.upper_bound);
  const double drift = double(pb.slots.size()) * width;
  const double value_tol = 1e-9 * std::max(1.0, std::abs(pb.upper_bound));
  // A state at leaf c, slot i: its value, the remaining slots' least costs, less the multiplied
  // slacks it leaves: memory, the forward time earlier leaves may take (s, for the deadlines
  // passed) and the deadlines ahead (j <= c), whose usage so far is x.r + kappa (less the drift).
  auto cannot_beat = [&](const State& x, size_t slot, size_t c) {
    if (!bounded) return false;
    double b = x.v + dual->rest[slot] - dual->mu_e_upto[c] + dual->w_upto[c] * (x.r + dual->kappa[slot] - drift);
    if (prep.limited) b -= dual->lm * double(prep.memory_slack - x.m);
    if (dual->mu_after[c] > 0) b -= dual->mu_after[c] * (x.s - prep.min_f_pre[c]);
    return b > pb.upper_bound + value_tol;
  };

  std::vector<std::vector<State>> layers(1, std::vector<State>(1));
  std::vector<size_t> slot_of_layer(1, 0);
  double r_base = 0;  // the fastest seconds of the leaves processed so far
  size_t next_slot = 0;  // in prep.order
  for (size_t j = n; j-- > 0;) {
    for (State& x : layers.back()) x.s -= pb.leaves[j].forward;
    r_base += pb.leaves[j].forward + pb.leaves[j].backward;
    for (; next_slot < prep.order.size() && pb.slots[prep.order[next_slot]].leaf == j; ++next_slot) {
      const size_t i = prep.order[next_slot];
      r_base += prep.min_r[i];
      const std::vector<State>& prev = layers.back();
      std::vector<State> next;
      next.reserve(prev.size() * pb.slots[i].options.size());
      for (size_t p = 0; p < prev.size(); ++p) {
        for (size_t o = 0; o < pb.slots[i].options.size(); ++o) {
          const ChainOption& opt = pb.slots[i].options[o];
          State x;
          x.r = prev[p].r + (opt.forward + opt.backward - prep.min_r[i]);
          if (x.r + r_base > prep.u[j] + tol) continue;
          x.s = prev[p].s - opt.forward;
          if (x.s < prep.min_f_pre[j] - tol) continue;
          x.m = prep.limited ? prev[p].m + (opt.memory - prep.min_m[i]) : 0;
          if (x.m > prep.memory_slack) continue;
          x.v = prev[p].v + opt.value;
          if (cannot_beat(x, i, j)) continue;
          x.bin = std::min<int64_t>(int64_t(x.r / width), bins);
          x.parent = int32_t(p);
          x.option = int32_t(o);
          next.push_back(x);
        }
      }
      prune(next);
      out.states += int64_t(next.size());
      if (out.states > pb.max_states) {
        out.gave_up = true;
        return out;
      }
      layers.push_back(std::move(next));
      slot_of_layer.push_back(i);
    }
    std::vector<State>& cur = layers.back();
    if (prep.deadline[j] < INF)
      for (State& x : cur) x.s = std::min(x.s, prep.deadline[j] - (x.r + r_base));
    std::erase_if(cur, [&](const State& x) { return x.s < prep.min_f_pre[j] - tol || x.r + r_base > prep.u[j] + tol; });
    if (cur.empty()) return out;
  }
  const std::vector<State>& last = layers.back();
  size_t best = 0;
  for (size_t k = 1; k < last.size(); ++k)
    if (last[k].v < last[best].v || (last[k].v == last[best].v && last[k].r < last[best].r)) best = k;
  if (bounded && last[best].v > pb.upper_bound + value_tol) return out;  // nothing beats the known plan
  out.feasible = true;
  out.choice.assign(pb.slots.size(), 0);
  out.memory = prep.memory_floor;
  for (size_t l = layers.size() - 1, at = best; l > 0; --l) {
    const State& x = layers[l][at];
    const size_t i = slot_of_layer[l];
    out.choice[i] = x.option;
    out.value += pb.slots[i].options[size_t(x.option)].value;
    out.memory += pb.slots[i].options[size_t(x.option)].memory - prep.min_m[i];
    at = size_t(x.parent);
  }
  return out;
}

}  // namespace qsync
