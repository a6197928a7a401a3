// File: planner/allocator_model.cpp
// The allocator's job model (planner/allocator_model.h): per-rank options from the scaled
// profiles, plan evaluation by the per-rank step bound, training ranks, the default target, and
// turning choices into an Allocation verified by replay_step.
#include "planner/allocator_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <stdexcept>

namespace qsync {
namespace {

constexpr double TRAINING_BAND = 1.10;  // training ranks: compute within 10 % of the fastest

bool is_gemm(const LayerDesc& l) { return l.kind == LayerKind::LINEAR || l.kind == LayerKind::CONV2D; }

std::string who(const RankModel& r) { return "rank " + std::to_string(r.rank) + " (" + r.device_class + ")"; }

double indicator_of(const IndicatorTable& t, const std::string& layer, LayerPrecision p) {
  if (auto lt = t.find(layer); lt != t.end())
    if (auto pt = lt->second.find(p); pt != lt->second.end()) return pt->second;
  return p == LayerPrecision::FP32 ? 0.0 : std::numeric_limits<double>::quiet_NaN();
}

std::string mib(int64_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f MiB", double(bytes) / double(1 << 20));
  return buf;
}

}  // namespace

std::vector<int64_t> resolve_local_batches(const AllocationRequest& req) {
  const int64_t world = int64_t(req.pool.size());
  std::vector<int64_t> out;
  for (int64_t r = 0; r < world; ++r) {
    const int64_t own = req.pool[size_t(r)].local_batch;
    out.push_back(own > 0 ? own : req.global_batch / world + (r < req.global_batch % world ? 1 : 0));
    if (out.back() <= 0)
      throw std::invalid_argument("rank " + std::to_string(r) + " gets no samples of a global batch of " +
                                  std::to_string(req.global_batch) + " over " + std::to_string(world) +
                                  " ranks: raise globalBatch to at least the number of ranks");
  }
  return out;
}

RankModel rank_model(const JobModel& job, size_t r, int64_t local_batch) {
  const AllocationRequest& req = *job.request;
  const PoolRank& pr = req.pool[r];
  RankModel m;
  m.rank = r;
  m.device_class = pr.device_class.empty() ? pr.profile.device_class : pr.device_class;
  m.local_batch = local_batch;
  m.memory_budget = pr.memory_budget_bytes;
  if (pr.profile.model_hash != 0 && req.model.hash != 0 && pr.profile.model_hash != req.model.hash)
    throw std::invalid_argument(who(m) + ": its profile is for model " + pr.profile.model + " (hash " +
                                model_hash_string(pr.profile.model_hash) + "), not " + req.model.name + " (hash " +
                                model_hash_string(req.model.hash) + "); profile this model on the class");
  const DeviceProfile p = device_profile_scaled(pr.profile, local_batch);
  m.fixed_forward.assign(job.leaves.size(), 0.0);
  m.fixed_backward.assign(job.leaves.size(), 0.0);
  m.fixed_memory = p.static_bytes + p.step_overhead_bytes;
  m.optimizer = p.optimizer_seconds;
  if (!job.leaves.empty()) m.fixed_forward[0] += p.step_overhead_seconds;  // as the replayer (device_profile.h)
  // The gradient copies, as the replayer: in, within the backward; out, before the optimizer
  // (this model's optimizer term is what follows the all-reduce chain).
  const GradientCopies copies = gradient_copy_seconds(p, job.buckets);
  add_bucket_copies(m.fixed_backward, job.buckets, copies);
  m.optimizer += copies.out_of_buckets;
  auto add_slot = [&](const LayerDesc& l, size_t leaf) {
    auto it = p.gemm_layers.find(l.name);
    if (it == p.gemm_layers.end() || it->second.empty())
      throw std::invalid_argument(who(m) + ": the profile has no costs for GEMM layer '" + l.name +
                                  "'; profile model " + req.model.name + " on this class (qsync-worker profile)");
    GemmSlot s;
    s.layer = &l;
    s.leaf = leaf;
    for (const auto& [prec, c] : it->second)
      s.options.push_back({prec, c.forward_seconds, c.backward_seconds, c.saved_bytes + c.weight_bytes,
                           indicator_of(req.indicator, l.name, prec)});
    std::sort(s.options.begin(), s.options.end(), [](const GemmOption& a, const GemmOption& b) {
      return layer_precision_traits(a.precision).aggressiveness < layer_precision_traits(b.precision).aggressiveness;
    });
    m.slots.push_back(std::move(s));
  };
  for (size_t i = 0; i < job.leaves.size(); ++i) {
    const LayerDesc& l = *job.leaves[i];
    if (is_gemm(l)) {
      add_slot(l, i);
      continue;
    }
    if (auto it = p.other_layers.find(l.name); it != p.other_layers.end()) {
      m.fixed_forward[i] += it->second.forward_seconds;
      m.fixed_backward[i] += it->second.backward_seconds;
      m.fixed_memory += it->second.saved_bytes + it->second.weight_bytes;
    }
    for (const LayerDesc& c : l.children)
      if (is_gemm(c)) add_slot(c, i);
  }
  if (!job.buckets.empty())
    for (size_t i = 0; i < job.buckets.back().first_leaf; ++i) m.fixed_before_last_bucket += m.fixed_backward[i];
  return m;
}

JobModel job_model(const AllocationRequest& req, const std::vector<int64_t>& local_batches) {
  JobModel job;
  job.request = &req;
  job.leaves = model_leaf_layers(req.model);
  for (const LayerDesc* l : job.leaves) job.leaf_params.push_back(leaf_parameter_count(*l));
  if (req.pool.size() > 1) job.buckets = gradient_buckets(job.leaf_params, req.bucket_bytes);
  for (size_t r = 0; r < req.pool.size(); ++r) {
    job.ranks.push_back(rank_model(job, r, local_batches[r]));
    job.optimizer_max = std::max(job.optimizer_max, job.ranks.back().optimizer);
  }
  return job;
}

RankEvaluation evaluate_rank(const JobModel& job, const RankModel& rank, const Choice& choice) {
  std::vector<double> fwd = rank.fixed_forward, bwd = rank.fixed_backward;
  RankEvaluation e;
  e.memory = rank.fixed_memory;
  for (size_t s = 0; s < rank.slots.size(); ++s) {
    const GemmOption& o = rank.slots[s].options[size_t(choice[s])];
    fwd[rank.slots[s].leaf] += o.forward;
    bwd[rank.slots[s].leaf] += o.backward;
    e.memory += o.memory;
    e.indicator += o.indicator;
  }
  const RankTimeline t = rank_timeline(fwd, bwd, job.buckets);
  e.backward_end = t.backward_end;
  e.compute = t.backward_end + rank.optimizer;
  e.bound = e.compute;
  if (!job.buckets.empty())
    e.bound = std::max(e.bound, allreduce_chain_end(t.bucket_ready, job.buckets, job.request->comm) + job.optimizer_max);
  return e;
}

bool fits_memory(const RankModel& rank, int64_t memory) { return rank.memory_budget <= 0 || memory <= rank.memory_budget; }

Choice choice_at(const RankModel& rank, LayerPrecision p, bool exact_only) {
  const int want = layer_precision_traits(p).aggressiveness;
  Choice c;
  for (const GemmSlot& s : rank.slots) {
    int best = -1, best_gap = 0;
    for (size_t o = 0; o < s.options.size(); ++o) {
      const int a = layer_precision_traits(s.options[o].precision).aggressiveness;
      if (exact_only && a != want) continue;
      const int gap = std::abs(a - want);
      if (best < 0 || gap < best_gap || (gap == best_gap && a > want)) best = int(o), best_gap = gap;
    }
    c.push_back(best);
  }
  return c;
}

bool choice_complete(const Choice& c) {
  return std::all_of(c.begin(), c.end(), [](int o) { return o >= 0; });
}

void check_memory_feasible(const RankModel& rank) {
  if (rank.memory_budget <= 0) return;
  int64_t least = rank.fixed_memory;
  for (const GemmSlot& s : rank.slots) {
    int64_t m = std::numeric_limits<int64_t>::max();
    for (const GemmOption& o : s.options) m = std::min(m, o.memory);
    least += m;
  }
  if (least > rank.memory_budget)
    throw InfeasiblePlan(who(rank) + " cannot hold the model at local batch " + std::to_string(rank.local_batch) +
                         " within its memory budget of " + std::to_string(rank.memory_budget) + " bytes (" +
                         mib(rank.memory_budget) + ") even at its lowest-memory precisions; the smallest budget that would fit is " +
                         std::to_string(least) + " bytes (" + mib(least) +
                         "): raise its memoryBudget to that, lower its local batch, or drop it from the pool");
}

std::vector<size_t> training_ranks(const JobModel& job) {
  const LayerPrecision high = job.request->high;
  std::vector<double> compute(job.ranks.size(), std::numeric_limits<double>::infinity());
  double fastest = std::numeric_limits<double>::infinity();
  for (size_t r = 0; r < job.ranks.size(); ++r) {
    const Choice c = choice_at(job.ranks[r], high, true);
    if (!choice_complete(c)) continue;
    compute[r] = evaluate_rank(job, job.ranks[r], c).compute;
    fastest = std::min(fastest, compute[r]);
  }
  if (!std::isfinite(fastest))
    throw std::invalid_argument(std::string("no device class in the pool profiles every GEMM layer at ") +
                                layer_precision_name(high) +
                                ", the training devices' high precision; set planning.precision to one they have");
  std::vector<size_t> out;
  for (size_t r = 0; r < job.ranks.size(); ++r)
    if (compute[r] <= fastest * TRAINING_BAND) out.push_back(r);
  return out;
}

double default_target(const JobModel& job, const std::vector<size_t>& training) {
  double target = 0;
  for (size_t r : training)
    target = std::max(target, evaluate_rank(job, job.ranks[r], choice_at(job.ranks[r], job.request->high, true)).bound);
  return target;
}

Allocation finish_allocation(const JobModel& job, const std::string& strategy, const std::vector<Choice>& choices,
                             double target, const std::vector<size_t>& training, std::vector<std::string> notes) {
  const AllocationRequest& req = *job.request;
  Allocation a;
  a.strategy = strategy;
  a.step_time_target = target;
  a.training_ranks = training;
  std::vector<ReplayRank> replay;
  for (size_t r = 0; r < job.ranks.size(); ++r) {
    const RankModel& m = job.ranks[r];
    RankPlan p;
    p.model = req.model.name;
    p.model_hash = req.model.hash;
    p.rank = int(r);
    p.device_class = m.device_class;
    p.local_batch = m.local_batch;
    double indicator = 0;
    for (size_t s = 0; s < m.slots.size(); ++s) {
      const GemmOption& o = m.slots[s].options[size_t(choices[r][s])];
      p.layers[m.slots[s].layer->name] = o.precision;
      indicator += o.indicator;
    }
    a.rank_indicator.push_back(indicator);
    a.total_indicator += indicator;
    a.plans.push_back(p);
    replay.push_back({&req.pool[r].profile, p});
  }
  a.predicted = replay_step(req.model, replay, req.comm, req.bucket_bytes);
  for (size_t r = 0; r < a.plans.size(); ++r) {
    a.plans[r].predicted_step_seconds = a.predicted.ranks[r].step_seconds;
    if (!fits_memory(job.ranks[r], a.predicted.ranks[r].peak_memory_bytes)) {
      a.fits_memory = false;
      notes.push_back(who(job.ranks[r]) + " is predicted to need " + mib(a.predicted.ranks[r].peak_memory_bytes) +
                      ", over its budget of " + mib(job.ranks[r].memory_budget));
    }
  }
  a.meets_target = step_meets_target(a.predicted, target);
  a.notes = std::move(notes);
  return a;
}

bool step_meets_target(const StepPrediction& p, double target) {
  return p.step_seconds - p.jitter_seconds <= target * (1 + 1e-9);
}

}  // namespace qsync
