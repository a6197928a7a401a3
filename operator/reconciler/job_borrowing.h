// File: operator/reconciler/job_borrowing.h
// A HybridTrainingJob's borrowing, between its spec and the pure logic of operator/lending:
// each inference entry with a `borrow` becomes a BorrowSource (the workload to borrow from,
// its LendingPolicy with parsed cron windows and time zones, the demand query, the entry's
// node selector and count), the elastic bounds come from spec.elasticPolicy, and the entries'
// borrow plans become the PoolCapacity pool discovery places ranks by. The reconciler and the
// simulation (bench/lending_sim) share all of it; only where the observations come from (the
// API, or a model of a cluster) differs.
//
//   const std::vector<BorrowSource> sources = borrow_sources(job.spec);   // throws naming the field
//   const auto plans = lending::plan_borrowing(entries, free, now);
//   const PoolCapacity capacity = pool_capacity(sources, plans, free, elastic_bounds(job.spec).max_ranks);
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "operator/api/hybrid_training_job.h"
#include "operator/lending/borrow_plan.h"
#include "operator/lending/elastic_resize.h"
#include "operator/reconciler/pool_discovery.h"

namespace qsync::reconciler {

struct BorrowSource {
  size_t index = 0;                  // in spec.pool.inference
  std::string entry;                 // the entry's name
  std::string path;                  // "spec.pool.inference[0].borrow", for messages
  std::string kind = "Deployment";   // Deployment | StatefulSet
  std::string name;                  // the workload by name, or
  std::map<std::string, std::string> selector;  // by labels (exactly one workload must match)
  lending::LendingPolicy policy;
  std::string prometheus_url, prometheus_query;  // the demand signal ("" query: none; "" url: the operator's)
  std::map<std::string, std::string> node_selector;
  int64_t max_ranks = 1;             // the entry's count
  int64_t gpus_per_rank = 1;         // the entry's gpusPerRank (default 1: lent GPUs)
};

// The borrowing entries of a spec. Throws std::invalid_argument naming the field and the fix
// (a cron expression that does not parse, an unknown time zone) before any work.
std::vector<BorrowSource> borrow_sources(const api::HybridTrainingJobSpec& spec);

struct ElasticBounds {
  bool elastic = false;  // spec.elasticPolicy is set, or an entry borrows
  int64_t min_ranks = 1;
  int64_t max_ranks = 0;  // 0: the pool's counts
  double grow_cooldown_seconds = 300;
  double min_growth_gain = 0.05;  // a growth must promise this much more throughput
};
ElasticBounds elastic_bounds(const api::HybridTrainingJobSpec& spec);

// Names of the schedulable nodes whose labels contain `selector`, sorted.
std::vector<std::string> matching_node_names(const std::map<std::string, std::string>& selector,
                                             const std::vector<nlohmann::json>& nodes);

// What discover_pool places for the borrowing entries (their plans' ranks) and the free GPUs
// left after them for the other entries.
PoolCapacity pool_capacity(const std::vector<BorrowSource>& sources, const std::vector<lending::BorrowPlan>& plans,
                           std::map<std::string, int64_t> free_gpus, int64_t max_ranks);

// Ranks as the slots the resize decision compares.
std::vector<lending::RankSlot> rank_slots(const std::vector<DiscoveredRank>& ranks);

}  // namespace qsync::reconciler
