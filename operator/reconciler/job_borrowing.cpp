// File: operator/reconciler/job_borrowing.cpp
// Borrowing entries of a spec as BorrowSources, the elastic bounds, and borrow plans as the
// pool capacity (see job_borrowing.h).
#include "operator/reconciler/job_borrowing.h"

#include <algorithm>
#include <stdexcept>

namespace qsync::reconciler {
namespace {

using json = nlohmann::json;

lending::LendingPolicy policy_of(const BorrowSpec& b, const std::string& path) {
  lending::LendingPolicy p;
  p.min_serving_replicas = b.min_serving_replicas;
  p.reclaim_grace_seconds = double(b.reclaim_grace_seconds);
  p.lend_cooldown_seconds = double(b.lend_cooldown_seconds);
  for (size_t w = 0; w < b.windows.size(); ++w) {
    const LendingWindowSpec& spec = b.windows[w];
    const std::string where = path + ".windows[" + std::to_string(w) + "]";
    try {
      p.windows.push_back(lending::lending_window(spec.start, spec.end, spec.time_zone));
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(where + ": " + e.what());
    }
  }
  if (b.demand) {
    const DemandSignal& d = *b.demand;
    lending::DemandPolicy dp;
    if (d.threshold) {
      dp.sizing = lending::DemandPolicy::Sizing::THRESHOLD;
      dp.threshold = *d.threshold;
    } else if (d.requests_per_replica) {
      dp.sizing = lending::DemandPolicy::Sizing::REQUESTS_PER_REPLICA;
      dp.requests_per_replica = *d.requests_per_replica;
    } else if (d.queueing) {
      dp.sizing = lending::DemandPolicy::Sizing::QUEUEING;
      dp.queueing = {.service_seconds = d.queueing->service_time_seconds,
                     .servers_per_replica = d.queueing->servers_per_replica,
                     .wait_target_seconds = d.queueing->wait_target_seconds,
                     .wait_quantile = d.queueing->wait_quantile};
      try {  // the sizing must be able to answer for some demand
        lending::replicas_for_demand(dp.queueing, 1.0);
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument(path + ".demand.queueing: " + e.what());
      }
    }
    dp.headroom = d.headroom_percent / 100.0;
    dp.max_sample_age_seconds = double(d.max_sample_age_seconds);
    p.demand = dp;
  }
  return p;
}

}  // namespace

std::vector<BorrowSource> borrow_sources(const api::HybridTrainingJobSpec& spec) {
  std::vector<BorrowSource> out;
  for (size_t i = 0; i < spec.pool.inference.size(); ++i) {
    const PoolEntry& e = spec.pool.inference[i];
    if (!e.borrow) continue;
    BorrowSource s;
    s.index = i;
    s.entry = e.name;
    s.path = "spec.pool.inference[" + std::to_string(i) + "].borrow";
    s.kind = e.borrow->workload.kind;
    s.name = e.borrow->workload.name;
    s.selector = e.borrow->workload.selector;
    s.policy = policy_of(*e.borrow, s.path);
    if (e.borrow->demand) {
      s.prometheus_url = e.borrow->demand->prometheus.url;
      s.prometheus_query = e.borrow->demand->prometheus.query;
    }
    s.node_selector = e.node_selector;
    s.max_ranks = e.count;
    s.gpus_per_rank = e.gpus_per_rank.value_or(1);
    out.push_back(std::move(s));
  }
  return out;
}

ElasticBounds elastic_bounds(const api::HybridTrainingJobSpec& spec) {
  ElasticBounds b;
  int64_t counts = 0;
  bool borrows = false;
  for (const PoolEntry& e : spec.pool.training) counts += e.count;
  for (const PoolEntry& e : spec.pool.inference) {
    counts += e.count;
    borrows = borrows || e.borrow.has_value();
  }
  b.elastic = spec.elastic_policy.has_value() || borrows;
  b.max_ranks = counts;
  if (spec.elastic_policy) {
    b.min_ranks = spec.elastic_policy->min_ranks;
    if (spec.elastic_policy->max_ranks) b.max_ranks = std::min(counts, *spec.elastic_policy->max_ranks);
    b.grow_cooldown_seconds = double(spec.elastic_policy->grow_cooldown_seconds);
    b.min_growth_gain = spec.elastic_policy->min_growth_percent / 100.0;
  }
  b.max_ranks = std::min(b.max_ranks, spec.global_batch);  // every rank needs a sample of the batch
  return b;
}

std::vector<std::string> matching_node_names(const std::map<std::string, std::string>& selector, const std::vector<json>& nodes) {
  std::vector<std::string> out;
  for (const json& n : nodes) {
    if (!node_is_schedulable(n)) continue;
    const json labels = n["metadata"].value("labels", json::object());
    bool all = true;
    for (const auto& [k, v] : selector) all = all && labels.contains(k) && labels[k].is_string() && labels[k] == v;
    if (all) out.push_back(n["metadata"].value("name", ""));
  }
  std::sort(out.begin(), out.end());
  return out;
}

PoolCapacity pool_capacity(const std::vector<BorrowSource>& sources, const std::vector<lending::BorrowPlan>& plans,
                           std::map<std::string, int64_t> free_gpus, int64_t max_ranks) {
  PoolCapacity c;
  for (size_t i = 0; i < sources.size(); ++i) {
    const std::map<std::string, int64_t> ranks = i < plans.size() ? plans[i].ranks : std::map<std::string, int64_t>{};
    c.borrowed[sources[i].entry] = ranks;
    for (const auto& [node, n] : ranks) free_gpus[node] -= n * sources[i].gpus_per_rank;
  }
  c.free_gpus = std::move(free_gpus);
  c.max_ranks = max_ranks;
  return c;
}

std::vector<lending::RankSlot> rank_slots(const std::vector<DiscoveredRank>& ranks) {
  std::vector<lending::RankSlot> out;
  for (const DiscoveredRank& r : ranks) out.push_back({r.pool_kind, r.entry, r.node, r.device_class, r.gpus});
  return out;
}

}  // namespace qsync::reconciler
