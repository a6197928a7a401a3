// File: planner/allocator_exact.cpp
// The "exact" strategy: per rank, the least-indicator plan whose step bound stays within the
// target and whose memory fits, by the chain DP of planner/allocator_solver.h; then, with
// allow_batch_moves, moves of a few samples: first, when a rank misses the target even at its
// fastest precisions, from the slowest rank to others until the slowest bound (training ranks at
// their high precision, the others at their fastest) stops falling (straggler relief; the plan
// is then made for that step, plus a small slack, if it is above the target), then from quantized
// ranks to others while that lowers the total indicator.
//
// Why per rank is enough: the job's step time is max_r bound(r) (allocator_model.h) and the
// objective is a sum over ranks, so once the target is fixed the ranks' problems are independent
// and their optima add up to the job's optimum.
// Why the DP's deadlines are exact: bound(r) <= target holds iff the rank's backward ends by
// target - optimizer(r) and, for every gradient bucket k, its ready time (the backward end of
// its first leaf) is at most target - (all-reduce seconds of buckets k..last) - the slowest
// optimizer: the all-reduce chain ends at max_k(ready_k + those seconds). These are the chain
// DP's per-leaf deadlines, so the DP solves the rank's problem itself, not a relaxation; its only
// gap is the time discretization (at most m / bins of the slack, allocator_solver.h). The
// greedy plan, when it meets the target, is handed to the DP as a known plan: it prunes, and it
// is returned when nothing beats it.
// Why no previous-layer precision in the DP state: in our engine every layer outputs FP32 (a
// GEMM layer dequantizes/upcasts its own output), so the cast a GEMM layer needs depends only on
// its own precision and is already inside its profiled cost; a layer's cost does not depend on
// its neighbours. (An engine that kept low-precision activations between layers would carry the
// previous slot's precision in the state and add the neighbour cast to each transition.)
// The plan is then checked with the exact bound (and the allocation replayed by replay_step);
// should rounding ever push it over, the deadlines are tightened by the excess and the rank
// re-solved (a safety net: a note says so if it is ever used).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <limits>
#include <map>
#include <stdexcept>
#include <thread>

#include "planner/allocator_model.h"
#include "planner/allocator_solver.h"

namespace qsync {
namespace {

constexpr int TIGHTEN_ROUNDS = 4;
constexpr int MAX_BATCH_MOVES = 32;
constexpr int64_t MOVE_SIZES[] = {1, 2, 4, 8, 16};
// Straggler relief plans for the fastest balanced step plus this fraction: room for the
// least-indicator plan to keep layers at high precision where quantizing them buys little time
// (2%: below the step-to-step noise of the machines measured here).
constexpr double RELIEF_SLACK = 0.02;

// The rank as a chain problem: its leaves' fixed work, the deadlines of `target` (none when
// target is infinite), and per slot its scored options (value: indicator, or seconds when
// `value_is_time`). `index` maps the problem's options back to the slots' option indices.
struct RankChain {
  ChainProblem problem;
  std::vector<std::vector<int>> index;
};

RankChain rank_chain(const JobModel& job, const RankModel& rank, double target, double tighten, bool value_is_time) {
  RankChain c;
  for (size_t j = 0; j < rank.fixed_forward.size(); ++j) {
    ChainLeaf leaf;
    leaf.forward = rank.fixed_forward[j];
    leaf.backward = rank.fixed_backward[j];
    c.problem.leaves.push_back(leaf);
  }
  if (std::isfinite(target) && !c.problem.leaves.empty()) {
    c.problem.leaves[0].deadline = target - tighten - rank.optimizer;
    double later = 0;  // all-reduce seconds of this bucket and every later one
    for (size_t k = job.buckets.size(); k-- > 0;) {
      later += job.request->comm.seconds(job.buckets[k].bytes);
      double& d = c.problem.leaves[job.buckets[k].first_leaf].deadline;
      d = std::min(d, target - tighten - later - job.optimizer_max);
    }
  }
  c.problem.memory_budget = rank.memory_budget > 0 ? rank.memory_budget - rank.fixed_memory : -1;
  c.problem.bins = job.request->time_bins;
  for (const GemmSlot& s : rank.slots) {
    ChainSlot slot;
    slot.leaf = s.leaf;
    c.index.emplace_back();
    for (size_t o = 0; o < s.options.size(); ++o) {
      const GemmOption& g = s.options[o];
      if (std::isnan(g.indicator)) continue;
      slot.options.push_back({g.forward, g.backward, g.memory, value_is_time ? g.seconds() : g.indicator});
      c.index.back().push_back(int(o));
    }
    if (slot.options.empty())
      throw std::invalid_argument("rank " + std::to_string(rank.rank) + " (" + rank.device_class +
                                  "): no profiled precision of layer '" + s.layer->name +
                                  "' has an indicator value; pass calibration statistics that cover it");
    c.problem.slots.push_back(std::move(slot));
  }
  return c;
}

Choice to_choice(const RankChain& c, const std::vector<int>& picked) {
  Choice out(picked.size());
  for (size_t s = 0; s < picked.size(); ++s) out[s] = c.index[s][size_t(picked[s])];
  return out;
}

double rank_indicator(const RankModel& rank, const Choice& c) {
  double v = 0;
  for (size_t s = 0; s < c.size(); ++s) v += rank.slots[s].options[size_t(c[s])].indicator;
  return v;
}

}  // namespace

Choice fastest_choice(const JobModel& job, const RankModel& rank) {
  const RankChain c = rank_chain(job, rank, std::numeric_limits<double>::infinity(), 0, true);
  const ChainResult r = solve_chain(c.problem);
  if (!r.feasible)
    throw InfeasiblePlan("rank " + std::to_string(rank.rank) + " (" + rank.device_class +
                         ") cannot hold the model within its memory budget using the precisions the indicator scores; "
                         "raise its memoryBudget or pass calibration statistics that score its low precisions");
  return to_choice(c, r.choice);
}

Choice solve_rank_exact(const JobModel& job, const RankModel& rank, double target, bool& met, bool& certified) {
  met = false;
  certified = true;
  // The greedy plan, when it meets the target, bounds the DP: states that cannot beat it go.
  bool greedy_met = false;
  const Choice greedy = greedy_rank(job, rank, target, greedy_met);
  double tighten = 0;
  for (int round = 0; round < TIGHTEN_ROUNDS; ++round) {
    RankChain c = rank_chain(job, rank, target, tighten, false);
    if (greedy_met) c.problem.upper_bound = rank_indicator(rank, greedy);
    const ChainResult r = solve_chain(c.problem);
    if (r.gave_up) certified = false;
    if (!r.feasible && greedy_met) {  // nothing beats greedy: optimal within the gap (unless gave_up)
      met = true;
      return greedy;
    }
    if (!r.feasible) break;
    const Choice choice = to_choice(c, r.choice);
    const double bound = evaluate_rank(job, rank, choice).bound;
    if (within_target(bound, target)) {
      met = true;
      return choice;
    }
    certified = false;
    tighten += (bound - target) * (1 + 1e-9);
  }
  certified = false;
  return fastest_choice(job, rank);
}

namespace {

// The ranks' plans as the strategy goes: per rank its choice, whether it meets the target and
// whether the search certified it optimal.
struct ExactPlans {
  std::vector<Choice> choices;
  std::vector<bool> met, certified;

  void set(size_t r, Choice c, bool ok, bool sure) {
    choices[r] = std::move(c);
    met[r] = ok;
    certified[r] = sure;
  }
};

// Every rank solved at `target`; the ranks' problems are independent once the target is fixed,
// so they are solved on every core.
ExactPlans solve_ranks(const JobModel& job, double target) {
  const size_t n = job.ranks.size();
  std::vector<Choice> choices(n);
  std::vector<char> met_of(n, 0), certified_of(n, 0);
  std::vector<std::exception_ptr> errors(n);
  std::atomic<size_t> next{0};
  auto solve_some = [&] {
    for (size_t r; (r = next.fetch_add(1)) < n;) {
      try {
        bool ok = false, sure = false;
        choices[r] = solve_rank_exact(job, job.ranks[r], target, ok, sure);
        met_of[r] = ok;
        certified_of[r] = sure;
      } catch (...) {
        errors[r] = std::current_exception();
      }
    }
  };
  std::vector<std::thread> helpers;
  for (size_t t = 1; t < std::min<size_t>(n, std::max(1u, std::thread::hardware_concurrency())); ++t)
    helpers.emplace_back(solve_some);
  solve_some();
  for (std::thread& h : helpers) h.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
  return {std::move(choices), std::vector<bool>(met_of.begin(), met_of.end()),
          std::vector<bool>(certified_of.begin(), certified_of.end())};
}

void add_rank_notes(const JobModel& job, const ExactPlans& plans, std::vector<std::string>& notes) {
  for (size_t r = 0; r < job.ranks.size(); ++r) {
    const std::string name = "rank " + std::to_string(r) + " (" + job.ranks[r].device_class + ")";
    if (!plans.met[r])
      notes.push_back(name + " cannot reach the step-time target even at its fastest precisions; it runs its fastest "
                             "plan that fits in memory (lower its local batch or raise the target)");
    else if (!plans.certified[r])
      notes.push_back(name + ": the exact search hit its work limit (or its plan broke the target by rounding and was "
                             "re-solved with tightened deadlines); the plan is feasible but not certified optimal");
  }
}

bool is_training_rank(const std::vector<size_t>& training, size_t r) {
  return std::find(training.begin(), training.end(), r) != training.end();
}

// The local batches that balance the pool's slowest step bound, each rank at the fastest it may
// run (the training ranks at their high precision, the others at their fastest precisions):
// samples move from the slowest rank to another while that lowers the slowest bound. `worst`:
// that bound.
std::vector<int64_t> balanced_batches(const JobModel& job, const std::vector<size_t>& training, double& worst) {
  std::map<std::pair<size_t, int64_t>, double> fastest;  // (rank, batch) -> its fastest allowed bound
  auto fastest_bound = [&](size_t r, int64_t batch) {
    auto key = std::make_pair(r, batch);
    if (auto it = fastest.find(key); it != fastest.end()) return it->second;
    double bound = std::numeric_limits<double>::infinity();
    const RankModel m = rank_model(job, r, batch);
    const Choice choice = is_training_rank(training, r)
                              ? choice_at(m, job.request->pool[r].precision.value_or(job.request->high))
                              : fastest_choice(job, m);
    const RankEvaluation e = evaluate_rank(job, m, choice);
    if (fits_memory(m, e.memory)) bound = e.bound;
    return fastest[key] = bound;
  };
  std::vector<int64_t> batches;
  for (const RankModel& m : job.ranks) batches.push_back(m.local_batch);
  auto slowest = [&](const std::vector<int64_t>& b) {
    double w = 0;
    for (size_t r = 0; r < b.size(); ++r) w = std::max(w, fastest_bound(r, b[r]));
    return w;
  };
  worst = slowest(batches);
  for (int round = 0; round < 4 * MAX_BATCH_MOVES; ++round) {
    size_t w = 0;
    for (size_t r = 1; r < batches.size(); ++r)
      if (fastest_bound(r, batches[r]) > fastest_bound(w, batches[w])) w = r;
    double best = worst;
    std::vector<int64_t> best_batches;
    for (size_t s = 0; s < batches.size(); ++s) {
      if (s == w) continue;
      for (int64_t b : MOVE_SIZES) {
        if (b >= batches[w]) break;
        std::vector<int64_t> trial = batches;
        trial[w] -= b;
        trial[s] += b;
        const double t = slowest(trial);
        if (t < best - 1e-12) best = t, best_batches = trial;
      }
    }
    if (best_batches.empty()) break;
    batches = best_batches;
    worst = best;
  }
  return batches;
}

// Straggler relief, when some rank misses the target even at its fastest precisions: the batches
// balanced (balanced_batches), and the plan made for that balanced step plus RELIEF_SLACK: the
// fastest step the pool can reach, and within it the least-indicator plan, so a layer stays at
// high precision wherever its quantization buys less than the slack. (Balancing at the high
// precision instead costs no accuracy but gives up the weak ranks' quantized speed: the step of
// dynamic batching.) Returns the target planned for.
double relieve_straggler(JobModel& job, const std::vector<size_t>& training, double target, ExactPlans& plans,
                         std::vector<std::string>& notes) {
  double worst = 0;
  std::vector<int64_t> before;
  for (const RankModel& m : job.ranks) before.push_back(m.local_batch);
  const std::vector<int64_t> batches = balanced_batches(job, training, worst);
  if (batches == before) return target;
  const double planned = std::max(target, worst * (1 + RELIEF_SLACK));
  std::string moved;
  for (size_t r = 0; r < batches.size(); ++r)
    moved += std::string(moved.empty() ? "" : ", ") + "rank " + std::to_string(r) + " " + std::to_string(before[r]) +
             " -> " + std::to_string(batches[r]);
  char buf[160];
  if (planned > target)
    std::snprintf(buf, sizeof buf,
                  "; no plan reaches the %.3f ms target, the fastest balanced step is %.3f ms: planned for it + %.0f%%",
                  target * 1e3, worst * 1e3, RELIEF_SLACK * 100);
  else
    std::snprintf(buf, sizeof buf, "; every rank now meets the %.3f ms target", target * 1e3);
  notes.push_back("batch moves (a rank missed the step-time target at its fastest precisions; balanced with the "
                  "training ranks at " + std::string(layer_precision_name(job.request->high)) +
                  " and the others at their fastest precisions): " + moved + buf);
  for (size_t r = 0; r < batches.size(); ++r) {
    job.ranks[r] = rank_model(job, r, batches[r]);
    bool ok = false, sure = false;
    Choice c = solve_rank_exact(job, job.ranks[r], planned, ok, sure);
    plans.set(r, std::move(c), ok, sure);
  }
  return planned;
}

// Moves from a rank with a positive indicator to another, when both re-solved plans meet the
// target and the two ranks' indicator sum drops. A training rank takes samples only while it
// keeps its high precision: QSync quantizes the weak devices, never the training ones. Solves are
// cached per (rank, batch): the target is fixed here, so a rank's plan depends only on its batch.
void move_batch_for_indicator(JobModel& job, const std::vector<size_t>& training, double target, ExactPlans& plans,
                              std::vector<std::string>& notes) {
  struct Solved {
    RankModel model;
    Choice choice;
    double indicator = 0;
    bool ok = false, certified = false;
  };
  std::map<std::pair<size_t, int64_t>, Solved> cache;
  auto solve_at = [&](size_t r, int64_t batch) -> const Solved& {
    auto key = std::make_pair(r, batch);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
    Solved s;
    s.model = rank_model(job, r, batch);
    try {
      check_memory_feasible(s.model);
      s.choice = solve_rank_exact(job, s.model, target, s.ok, s.certified);
      s.indicator = rank_indicator(s.model, s.choice);
    } catch (const InfeasiblePlan&) {
      s.ok = false;
    }
    return cache.emplace(key, std::move(s)).first->second;
  };
  auto high_of = [&](size_t r) { return job.request->pool[r].precision.value_or(job.request->high); };
  for (int round = 0; round < MAX_BATCH_MOVES; ++round) {
    double best_gain = 1e-12;
    size_t best_from = 0, best_to = 0;
    int64_t best_b = 0;
    for (size_t w = 0; w < job.ranks.size(); ++w) {
      const double ind_w = rank_indicator(job.ranks[w], plans.choices[w]);
      if (!plans.met[w] || !(ind_w > 0)) continue;
      for (size_t s = 0; s < job.ranks.size(); ++s) {
        if (s == w || !plans.met[s]) continue;
        const double ind_s = rank_indicator(job.ranks[s], plans.choices[s]);
        for (int64_t b : MOVE_SIZES) {
          if (b >= job.ranks[w].local_batch) break;
          const Solved& a = solve_at(w, job.ranks[w].local_batch - b);
          const Solved& c = solve_at(s, job.ranks[s].local_batch + b);
          if (!a.ok || !c.ok) continue;
          if (is_training_rank(training, s) && c.indicator > rank_indicator(c.model, choice_at(c.model, high_of(s))))
            continue;
          const double gain = (ind_w + ind_s) - (a.indicator + c.indicator);
          if (gain > best_gain) best_gain = gain, best_from = w, best_to = s, best_b = b;
        }
      }
    }
    if (best_b == 0) break;
    const int64_t from_batch = job.ranks[best_from].local_batch - best_b;
    const int64_t to_batch = job.ranks[best_to].local_batch + best_b;
    for (auto [r, batch] : {std::make_pair(best_from, from_batch), std::make_pair(best_to, to_batch)}) {
      const Solved& sv = solve_at(r, batch);
      job.ranks[r] = sv.model;
      plans.set(r, sv.choice, sv.ok, sv.certified);
    }
    notes.push_back("batch move: " + std::to_string(best_b) + " samples from rank " + std::to_string(best_from) +
                    " to rank " + std::to_string(best_to) + " lower the total indicator by " + std::to_string(best_gain));
  }
}

}  // namespace

std::vector<Choice> allocate_exact(JobModel& job, double target, std::vector<std::string>& notes) {
  ExactPlans plans = solve_ranks(job, target);
  if (job.request->allow_batch_moves) {
    // The training ranks of the job as asked, before any batch moves.
    const std::vector<size_t> training = training_ranks(job);
    if (std::find(plans.met.begin(), plans.met.end(), false) != plans.met.end())
      target = relieve_straggler(job, training, target, plans, notes);
    move_batch_for_indicator(job, training, target, plans, notes);
  }
  add_rank_notes(job, plans, notes);
  return plans.choices;
}

}  // namespace qsync
