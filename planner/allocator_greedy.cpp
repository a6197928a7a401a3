// File: planner/allocator_greedy.cpp
// The "greedy" strategy, QSync's Syncer (research notes, section 4, case A), per rank:
//   - a rank whose uniform-`high` plan fits its memory and meets the target keeps it (the
//     training devices);
//   - any other rank starts at the lowest precision level (most aggressive first) whose uniform
//     plan fits and meets the target (a layer lacking that precision takes its nearest one);
//   - a max-heap holds, per layer, the indicator reduction of raising it one level (to its next
//     less aggressive scored precision); the top raise is kept only if memory and the step bound
//     (allocator_model.h: equal to the replayed step time's share of this rank) still hold;
//     otherwise the layer is dropped for good, as in QSync. A kept raise pushes the next one.
// A rank with no start that meets the target runs its fastest plan within memory, unraised.
#include <algorithm>
#include <cmath>
#include <queue>
#include <set>

#include "planner/allocator_model.h"
#include "planner/allocator_solver.h"

namespace qsync {
namespace {

int aggressiveness(LayerPrecision p) { return layer_precision_traits(p).aggressiveness; }

// The scored option of slot s nearest in aggressiveness to p (ties: the more aggressive).
int nearest_scored(const GemmSlot& s, LayerPrecision p) {
  int best = -1, best_gap = 0;
  for (size_t o = 0; o < s.options.size(); ++o) {
    if (std::isnan(s.options[o].indicator)) continue;
    const int a = aggressiveness(s.options[o].precision), gap = std::abs(a - aggressiveness(p));
    if (best < 0 || gap < best_gap || (gap == best_gap && a > aggressiveness(p))) best = int(o), best_gap = gap;
  }
  return best;
}

// The next less aggressive scored option above `o` (options are least aggressive first), or -1.
int raise_of(const GemmSlot& s, int o) {
  for (int u = o - 1; u >= 0; --u)
    if (!std::isnan(s.options[size_t(u)].indicator)) return u;
  return -1;
}

}  // namespace

Choice greedy_rank(const JobModel& job, const RankModel& rank, double target, bool& met) {
  met = true;
  const Choice high = choice_at(rank, job.request->high, true);
  if (choice_complete(high)) {
    const RankEvaluation e = evaluate_rank(job, rank, high);
    if (fits_memory(rank, e.memory) && within_target(e.bound, target)) return high;
  }
  // The precision levels this rank scores, lowest precision first.
  std::set<LayerPrecision> levels;
  for (const GemmSlot& s : rank.slots)
    for (const GemmOption& o : s.options)
      if (!std::isnan(o.indicator)) levels.insert(o.precision);
  std::vector<LayerPrecision> ladder(levels.begin(), levels.end());
  std::sort(ladder.begin(), ladder.end(),
            [](LayerPrecision a, LayerPrecision b) { return aggressiveness(a) > aggressiveness(b); });
  Choice c;
  for (LayerPrecision p : ladder) {
    Choice start;
    for (const GemmSlot& s : rank.slots) start.push_back(nearest_scored(s, p));
    if (!choice_complete(start)) continue;
    const RankEvaluation e = evaluate_rank(job, rank, start);
    if (fits_memory(rank, e.memory) && within_target(e.bound, target)) {
      c = start;
      break;
    }
  }
  if (c.empty()) {
    met = false;
    return fastest_choice(job, rank);
  }
  using Raise = std::pair<double, size_t>;  // (indicator reduction, slot)
  std::priority_queue<Raise> heap;
  auto push = [&](size_t s) {
    const int up = raise_of(rank.slots[s], c[s]);
    if (up >= 0) heap.push({rank.slots[s].options[size_t(c[s])].indicator - rank.slots[s].options[size_t(up)].indicator, s});
  };
  for (size_t s = 0; s < rank.slots.size(); ++s) push(s);
  while (!heap.empty()) {
    const size_t s = heap.top().second;
    heap.pop();
    const int before = c[s];
    c[s] = raise_of(rank.slots[s], before);
    const RankEvaluation e = evaluate_rank(job, rank, c);
    if (fits_memory(rank, e.memory) && within_target(e.bound, target)) push(s);
    else c[s] = before;  // dropped for good
  }
  return c;
}

std::vector<Choice> allocate_greedy(const JobModel& job, double target, std::vector<std::string>& notes) {
  std::vector<Choice> choices;
  for (const RankModel& rank : job.ranks) {
    bool met = false;
    choices.push_back(greedy_rank(job, rank, target, met));
    if (!met)
      notes.push_back("rank " + std::to_string(rank.rank) + " (" + rank.device_class +
                      "): no uniform precision level meets the step-time target within memory; it runs its fastest "
                      "plan that fits, unraised");
  }
  return choices;
}

}  // namespace qsync
