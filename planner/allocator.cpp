// File: planner/allocator.cpp
// allocate(): resolves the pool (local batches, scaled profiles, memory feasibility, training
// ranks, target), runs a strategy, and builds the Allocation. Holds the baselines ("uniform",
// "uniform-low-weak", "dynamic-batching") and the fallback indicator; "exact" and "greedy" live
// in allocator_exact.cpp and allocator_greedy.cpp.
#include "planner/allocator.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "planner/allocator_model.h"

namespace qsync {
namespace {

std::string who(const RankModel& r) { return "rank " + std::to_string(r.rank) + " (" + r.device_class + ")"; }

std::string profiled_precisions(const RankModel& rank) {
  std::string out;
  for (const GemmOption& o : rank.slots.empty() ? std::vector<GemmOption>{} : rank.slots.front().options)
    out += std::string(out.empty() ? "" : ", ") + layer_precision_name(o.precision);
  return out;
}

// Every rank at its own precision (PoolRank::precision) or `high`; a class lacking it is an error.
std::vector<Choice> uniform_choices(const JobModel& job) {
  std::vector<Choice> out;
  for (const RankModel& rank : job.ranks) {
    const LayerPrecision p = job.request->pool[rank.rank].precision.value_or(job.request->high);
    out.push_back(choice_at(rank, p, true));
    if (!choice_complete(out.back()))
      throw std::invalid_argument("uniform " + std::string(layer_precision_name(p)) + ": " + who(rank) +
                                  " does not profile every GEMM layer at " + layer_precision_name(p) + " (it has " +
                                  profiled_precisions(rank) +
                                  "); set planning.precision or the worker's precision to one it has");
  }
  return out;
}

// Ranks whose uniform-high bound exceeds the target run at `low` (or the class's nearest).
std::vector<Choice> uniform_low_weak_choices(const JobModel& job, double target, std::vector<std::string>& notes) {
  std::vector<Choice> out;
  const AllocationRequest& req = *job.request;
  for (const RankModel& rank : job.ranks) {
    Choice c = choice_at(rank, req.high, true);
    if (!choice_complete(c))
      throw std::invalid_argument(who(rank) + " does not profile every GEMM layer at " + layer_precision_name(req.high) +
                                  " (it has " + profiled_precisions(rank) + "); choose a high precision it has");
    if (!within_target(evaluate_rank(job, rank, c).bound, target)) {
      c = choice_at(rank, req.low, true);
      if (!choice_complete(c)) {
        c = choice_at(rank, req.low, false);
        notes.push_back(who(rank) + " has no " + layer_precision_name(req.low) +
                        "; its weak-rank plan uses its nearest precisions instead");
      }
    }
    out.push_back(c);
  }
  return out;
}

// Local batches proportional to speed at uniform high, each within the batch the rank's memory
// holds at high (water-filling), rounded by largest remainder to sum to the global batch, >= 1.
std::vector<int64_t> dynamic_batches(const JobModel& job) {
  const AllocationRequest& req = *job.request;
  const size_t n = job.ranks.size();
  const int64_t global = req.global_batch;
  if (global < int64_t(n))
    throw std::invalid_argument("dynamic batching needs a global batch of at least one sample per rank (" +
                                std::to_string(n) + "), got " + std::to_string(global) + "; raise globalBatch");
  std::vector<double> speed(n);
  std::vector<int64_t> cap(n, global);
  for (size_t r = 0; r < n; ++r) {
    const RankModel& rank = job.ranks[r];
    const Choice c = choice_at(rank, req.high, true);
    if (!choice_complete(c))
      throw std::invalid_argument("dynamic batching runs every rank at " + std::string(layer_precision_name(req.high)) +
                                  ", which " + who(rank) + " does not profile (it has " + profiled_precisions(rank) + ")");
    speed[r] = double(rank.local_batch) / std::max(evaluate_rank(job, rank, c).backward_end, 1e-300);
    if (rank.memory_budget <= 0) continue;
    auto fits_at = [&](int64_t b) {
      const RankModel m = rank_model(job, r, b);
      return fits_memory(m, evaluate_rank(job, m, choice_at(m, req.high, true)).memory);
    };
    if (!fits_at(1))
      throw InfeasiblePlan(who(rank) + " cannot hold one sample at " + layer_precision_name(req.high) +
                           " within its memory budget; dynamic batching does not quantize: raise its memoryBudget or "
                           "use the exact or greedy strategy");
    int64_t lo = 1, hi = global;  // the largest batch that fits
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo + 1) / 2;
      if (fits_at(mid)) lo = mid;
      else hi = mid - 1;
    }
    cap[r] = lo;
  }
  int64_t capacity = 0;
  for (int64_t c : cap) capacity += c;
  if (capacity < global)
    throw InfeasiblePlan("at " + std::string(layer_precision_name(req.high)) + " the pool's memory holds at most " +
                         std::to_string(capacity) + " samples per step, fewer than the global batch of " +
                         std::to_string(global) + "; lower globalBatch or raise memory budgets");
  // Water-filling: ideal shares, ranks over their cap pinned there and the rest re-shared.
  std::vector<double> ideal(n, 0.0);
  std::vector<bool> pinned(n, false);
  for (bool changed = true; changed;) {
    changed = false;
    double left = double(global), total_speed = 0;
    for (size_t r = 0; r < n; ++r) {
      if (pinned[r]) left -= double(cap[r]);
      else total_speed += speed[r];
    }
    for (size_t r = 0; r < n; ++r)
      if (!pinned[r]) ideal[r] = left * speed[r] / total_speed;
    for (size_t r = 0; r < n; ++r)
      if (!pinned[r] && ideal[r] > double(cap[r])) ideal[r] = double(cap[r]), pinned[r] = changed = true;
  }
  std::vector<int64_t> b(n);
  int64_t sum = 0;
  for (size_t r = 0; r < n; ++r) sum += b[r] = std::clamp<int64_t>(int64_t(std::floor(ideal[r])), 1, cap[r]);
  while (sum != global) {  // largest remainder up, most over-allocated down
    size_t pick = n;
    for (size_t r = 0; r < n; ++r) {
      const bool can = sum < global ? b[r] < cap[r] : b[r] > 1;
      if (!can) continue;
      const double rem = ideal[r] - double(b[r]);
      if (pick == n || (sum < global ? rem > ideal[pick] - double(b[pick]) : rem < ideal[pick] - double(b[pick]))) pick = r;
    }
    const int64_t step = sum < global ? 1 : -1;
    b[pick] += step;
    sum += step;
  }
  return b;
}

}  // namespace

std::vector<std::string> allocator_strategies() {
  return {"exact", "greedy", "uniform", "uniform-low-weak", "dynamic-batching"};
}

IndicatorTable indicator_fallback_table(const ModelDesc& model) {
  IndicatorTable t;
  int64_t total = 0;
  for (const LayerDesc* l : model_gemm_layers(model)) total += l->parameter_count;
  for (const LayerDesc* l : model_gemm_layers(model)) {
    const double share = total > 0 ? double(l->parameter_count) / double(total) : 0.0;
    for (const LayerPrecisionTraits& p : layer_precision_table()) t[l->name][p.mode] = p.aggressiveness * share;
  }
  return t;
}

Allocation allocate(const AllocationRequest& req, const std::string& strategy) {
  const std::vector<std::string> names = allocator_strategies();
  if (std::find(names.begin(), names.end(), strategy) == names.end()) {
    std::string list;
    for (const std::string& s : names) list += (list.empty() ? "" : ", ") + s;
    throw std::invalid_argument("unknown allocator strategy '" + strategy + "'; choose one of: " + list);
  }
  if (req.pool.empty()) throw std::invalid_argument("the pool has no devices; list the workers in spec.pool.local");
  JobModel job = job_model(req, resolve_local_batches(req));
  for (const RankModel& rank : job.ranks) check_memory_feasible(rank);
  const std::vector<size_t> training = training_ranks(job);
  // The solvers bound a step without its stats all-reduce (planner/replay_timeline.h), which
  // every plan pays alike; the target and the replayed prediction include it.
  const double stats = step_stats_seconds(req.comm, req.pool.size());
  const double target =
      req.step_time_target > 0 ? std::max(0.0, req.step_time_target - stats) : default_target(job, training);
  std::vector<std::string> notes;
  std::vector<Choice> choices;
  if (strategy == "exact") {
    choices = allocate_exact(job, target, notes);
  } else if (strategy == "greedy") {
    choices = allocate_greedy(job, target, notes);
  } else if (strategy == "uniform") {
    choices = uniform_choices(job);
  } else if (strategy == "uniform-low-weak") {
    choices = uniform_low_weak_choices(job, target, notes);
  } else {
    job = job_model(req, dynamic_batches(job));
    for (const RankModel& rank : job.ranks) choices.push_back(choice_at(rank, req.high, true));
  }
  return finish_allocation(job, strategy, choices, target + stats, training, std::move(notes));
}

}  // namespace qsync
