// File: bench/lending_sim/lending_simulation.cpp
// The simulated day: the operator's borrowing logic against the cluster model, and what it
// measured (see lending_simulation.h).
#include "bench/lending_sim/lending_simulation.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <sstream>
#include <stdexcept>

#include "operator/api/hybrid_training_job.h"
#include "operator/lending/borrow_plan.h"
#include "operator/lending/elastic_resize.h"
#include "operator/reconciler/job_borrowing.h"
#include "operator/reconciler/job_planning.h"
#include "planner/job_spec.h"

namespace qsync::lending_sim {
namespace {

using nlohmann::json;

json gpu_node(const std::string& name, const std::string& pool, const std::string& product, int64_t gpus) {
  return {{"metadata",
           {{"name", name},
            {"labels", {{"kubernetes.io/hostname", name}, {"qsync.dev/pool", pool}, {"nvidia.com/gpu.product", product}}}}},
          {"status",
           {{"allocatable", {{"nvidia.com/gpu", std::to_string(gpus)}, {"memory", "64Gi"}}},
            {"conditions", json::array({{{"type", "Ready"}, {"status", "True"}}})}}}};
}

std::string pad(int64_t i) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%02lld", static_cast<long long>(i));
  return buf;
}

// What plan_job makes of an offered pool, planned once per composition (classes and counts):
// its predicted step, and the ranks it runs on (the offered ones, or only the training ranks
// when the borrowed ones made the plan infeasible).
class PlanCache {
 public:
  struct Planned {
    double step_seconds = 0;
    bool without_borrowed = false;
  };
  PlanCache(const api::HybridTrainingJob& job, const std::vector<json>& nodes) : job_(job), nodes_(nodes) {}
  Planned plan(const std::vector<reconciler::DiscoveredRank>& ranks, const reconciler::PoolCapacity& capacity) {
    std::map<std::string, int64_t> by_class;
    for (const reconciler::DiscoveredRank& r : ranks) by_class[r.device_class]++;
    std::string key;
    for (const auto& [c, n] : by_class) key += c + "x" + std::to_string(n) + " ";
    auto it = plans_.find(key);
    if (it != plans_.end()) return it->second;
    const reconciler::JobPlan p = reconciler::plan_job(job_, {.nodes = nodes_, .config_maps = {}, .capacity = &capacity});
    return plans_[key] = {p.summary.predicted_step_seconds, p.ranks.size() != ranks.size()};
  }
  // The ranks a plan of `offered` runs on.
  static std::vector<reconciler::DiscoveredRank> ranks_of(const std::vector<reconciler::DiscoveredRank>& offered, const Planned& p) {
    if (!p.without_borrowed) return offered;
    std::vector<reconciler::DiscoveredRank> kept;
    for (const reconciler::DiscoveredRank& r : offered)
      if (r.pool_kind == reconciler::POOL_KIND_TRAINING) kept.push_back(r);
    return kept;
  }
  int64_t plans() const { return int64_t(plans_.size()); }

 private:
  const api::HybridTrainingJob& job_;
  const std::vector<json>& nodes_;
  std::map<std::string, Planned> plans_;
};

}  // namespace

std::string default_job_manifest() {
  return R"(apiVersion: qsync.dev/v1alpha1
kind: HybridTrainingJob
metadata: {name: sim, namespace: default}
spec:
  model: {zoo: char-gpt-192}
  steps: 100000000
  globalBatch: 8192
  planning: {allocator: exact}
  elasticPolicy: {minRanks: 4, maxRanks: 132, growCooldownSeconds: 600}
  pool:
    training:
      - {name: a100, nodeSelector: {qsync.dev/pool: training}, count: 4}
    inference:
      - name: l4
        nodeSelector: {qsync.dev/pool: inference}
        count: 128
        gpusPerRank: 1
        borrow:
          workload: {kind: Deployment, name: chat}
          minServingReplicas: 8
          reclaimGraceSeconds: 300
          lendCooldownSeconds: 600
          demand:
            prometheus: {query: 'sum(rate(chat_requests_total[1m]))'}
            queueing: {serviceTime: 500ms, serversPerReplica: 4, waitTarget: 100ms, waitQuantile: 0.99}
            headroomPercent: 10
)";
}

double SimReport::reclaim_quantile(double q) const {
  if (reclaim_seconds.empty()) return 0;
  std::vector<double> s = reclaim_seconds;
  std::sort(s.begin(), s.end());
  const double at = q * double(s.size() - 1);
  const size_t lo = size_t(std::floor(at)), hi = std::min(s.size() - 1, lo + 1);
  return s[lo] + (s[hi] - s[lo]) * (at - double(lo));
}

json SimReport::to_json() const {
  return {{"idleGpuHours", idle_gpu_hours},
          {"lentGpuHours", lent_gpu_hours},
          {"trainedGpuHours", trained_gpu_hours},
          {"usedFraction", used_fraction},
          {"samples", samples},
          {"samplesTrainingAlone", samples_alone},
          {"throughputGain", throughput_gain},
          {"stepSecondsAlone", step_seconds_alone},
          {"reclaims", reclaim_seconds.size()},
          {"reclaimMedianSeconds", reclaim_quantile(0.5)},
          {"reclaimP99Seconds", reclaim_quantile(0.99)},
          {"reclaimMaxSeconds", reclaim_seconds.empty() ? 0 : *std::max_element(reclaim_seconds.begin(), reclaim_seconds.end())},
          {"reclaimMisses", reclaim_misses},
          {"reclaimGraceSeconds", reclaim_grace_seconds},
          {"longestDeficitSeconds", longest_deficit_seconds},
          {"deficitReplicaSeconds", deficit_replica_seconds},
          {"minReadyReplicas", min_ready_replicas},
          {"minServingReplicas", min_serving_replicas},
          {"resizes", resizes},
          {"lends", lends},
          {"plans", plans},
          {"maxWorld", max_world},
          {"wallSeconds", wall_seconds}};
}

std::string SimReport::text() const {
  std::ostringstream o;
  o.setf(std::ios::fixed);
  o.precision(1);
  o << "GPU-hours idle (demand left)   " << idle_gpu_hours << "\n"
    << "GPU-hours lent to the job      " << lent_gpu_hours << " (" << 100 * used_fraction << " % of idle; trained on "
    << trained_gpu_hours << ")\n";
  o.precision(3);
  o << "training samples / day         " << samples << " vs " << samples_alone << " alone: x" << throughput_gain
    << " (alone: " << step_seconds_alone << " s/step)\n";
  o.precision(1);
  o << "reclaims                       " << reclaim_seconds.size() << ": median " << reclaim_quantile(0.5) << " s, p99 "
    << reclaim_quantile(0.99) << " s, misses " << reclaim_misses << " (grace " << reclaim_grace_seconds << " s)\n"
    << "serving deficit                longest " << longest_deficit_seconds << " s, " << deficit_replica_seconds
    << " replica-seconds; min Ready " << min_ready_replicas << " (minServingReplicas " << min_serving_replicas << ")\n"
    << "resizes " << resizes << ", scale-ins " << lends << ", plans " << plans << ", largest world " << max_world
    << "; simulated in " << wall_seconds << " s\n";
  return o.str();
}

std::string SimReport::timeline_text() const {
  std::ostringstream o;
  o << "hour   demand  needed replicas  ready borrowed world\n";
  char line[128];
  for (const std::vector<double>& t : timeline) {
    std::snprintf(line, sizeof line, "%5.2f %8.1f %7.0f %8.0f %6.0f %8.0f %5.0f\n", t[0], t[1], t[2], t[3], t[4], t[5], t[6]);
    o << line;
  }
  return o.str();
}

SimReport simulate_day(const SimConfig& c) {
  const auto wall0 = std::chrono::steady_clock::now();
  const api::HybridTrainingJob job = api::hybrid_training_job_from_json(job_yaml_to_json(c.job_manifest));
  const std::vector<reconciler::BorrowSource> sources = reconciler::borrow_sources(job.spec);
  if (sources.size() != 1) throw std::invalid_argument("the simulation runs a job with exactly one borrowing entry");
  const reconciler::BorrowSource& source = sources[0];
  if (!source.policy.demand) throw std::invalid_argument("the simulation needs a demand policy (borrow.demand)");
  const reconciler::ElasticBounds bounds = reconciler::elastic_bounds(job.spec);

  std::vector<json> node_objects;
  std::vector<SimNode> nodes;
  for (int64_t i = 0; i < c.training_nodes; ++i) {
    node_objects.push_back(gpu_node("train-" + pad(i), "training", c.training_gpu_product, c.gpus_per_training_node));
    nodes.push_back({"train-" + pad(i), c.gpus_per_training_node});
  }
  for (int64_t i = 0; i < c.inference_nodes; ++i) {
    node_objects.push_back(gpu_node("infer-" + pad(i), "inference", c.inference_gpu_product, c.gpus_per_inference_node));
    nodes.push_back({"infer-" + pad(i), c.gpus_per_inference_node});
  }
  const std::vector<std::string> entry_nodes = reconciler::matching_node_names(source.node_selector, node_objects);
  SimulatedCluster cluster(nodes, c.serving_replicas, 1, c.timings);
  const DiurnalDemand demand(c.demand);
  PlanCache plans(job, node_objects);
  lending::DemandPolicy true_need = *source.policy.demand;
  true_need.headroom = 0;

  SimReport r;
  r.reclaim_grace_seconds = source.policy.reclaim_grace_seconds;
  r.min_serving_replicas = source.policy.min_serving_replicas;
  r.min_ready_replicas = c.serving_replicas;
  // Training alone: the training entries' pool, all day.
  reconciler::PoolCapacity alone = reconciler::pool_capacity(sources, {lending::BorrowPlan{}}, {}, bounds.max_ranks);
  const std::vector<reconciler::DiscoveredRank> alone_ranks = reconciler::discover_pool(job.spec.pool, node_objects, &alone).ranks;
  r.step_seconds_alone = plans.plan(alone_ranks, alone).step_seconds;
  const double global_batch = double(job.spec.global_batch);
  r.samples_alone = c.duration_seconds * global_batch / r.step_seconds_alone;

  lending::LendingMemory memory;
  std::vector<reconciler::DiscoveredRank> current;  // the plan's ranks
  bool started = false;                              // the current plan's pods were created
  double current_step = 0, last_resize = 0, deficit_run = 0;
  const double dt = c.timings.reconcile_seconds;
  for (double t = 0; t < c.duration_seconds; t += dt) {
    const double now = c.day_start + t;
    cluster.advance_to(t);
    // What the interval [t - dt, t) held.
    const double rate = demand.rate(t);
    const lending::WorkloadObservation seen = cluster.workload();
    const int64_t serving = seen.serving_replicas > 0 ? seen.serving_replicas : seen.replicas;
    const int64_t need = std::clamp(lending::demand_replicas(true_need, rate, 0, serving), int64_t(0), serving);
    r.idle_gpu_hours += double(std::max<int64_t>(0, serving - std::max(need, source.policy.min_serving_replicas))) * dt / 3600;
    const int64_t lent = cluster.job_gpus_on(entry_nodes);
    r.lent_gpu_hours += double(lent) * dt / 3600;
    if (cluster.job_training()) {
      r.trained_gpu_hours += double(lent) * dt / 3600;
      r.samples += global_batch / current_step * dt;
    }
    const int64_t ready = cluster.ready_replicas();
    if (std::fmod(t, 900) < dt)
      r.timeline.push_back({t / 3600, rate, double(need), double(seen.replicas), double(ready), double(lent),
                            double(current.size())});
    r.min_ready_replicas = std::min(r.min_ready_replicas, ready);
    if (ready < need) {
      deficit_run += dt;
      r.deficit_replica_seconds += double(need - ready) * dt;
      r.longest_deficit_seconds = std::max(r.longest_deficit_seconds, deficit_run);
    } else {
      deficit_run = 0;
    }

    // The operator's pass: lending, then the pool and the resize.
    lending::BorrowEntry entry{source.entry, &source.policy, seen, lending::DemandSample{true, demand.rate(t - c.timings.demand_lag_seconds), now, ""},
                               memory, entry_nodes, 1, source.gpus_per_rank, source.max_ranks};
    const std::map<std::string, int64_t> free = lending::free_gpus(cluster.nodes(), cluster.pods());
    const std::vector<lending::BorrowPlan> borrow = lending::plan_borrowing({entry}, free, now);
    const lending::LendingDecision& d = borrow[0].decision;
    memory = d.memory;
    if (d.lend_started) ++r.lends;
    if (d.reclaim_finished) {
      r.reclaim_seconds.push_back(d.reclaim_finished->seconds);
      if (!d.reclaim_finished->within_grace) ++r.reclaim_misses;
    }
    if (d.target_replicas != seen.replicas || d.serving_replicas != seen.serving_replicas)
      cluster.scale_workload(d.target_replicas, d.serving_replicas, d.serving_replicas > 0 ? d.target_replicas : 0);

    const reconciler::PoolCapacity capacity = reconciler::pool_capacity(sources, borrow, free, bounds.max_ranks);
    const std::vector<reconciler::DiscoveredRank> offered = reconciler::discover_pool(job.spec.pool, node_objects, &capacity).ranks;
    lending::ResizeInputs in{reconciler::rank_slots(current), started, reconciler::rank_slots(offered), bounds.min_ranks, now,
                             last_resize, bounds.grow_cooldown_seconds};
    const lending::ResizeDecision rd = lending::decide_resize(in);
    bool adopt = rd.action == lending::ResizeAction::REPLAN;
    if (rd.action == lending::ResizeAction::RESIZE) {
      adopt = rd.reason != "PoolGrew" ||
              lending::growth_pays(current_step, plans.plan(offered, capacity).step_seconds, bounds.min_growth_gain);
      if (adopt) {
        cluster.stop_job();
        ++r.resizes;
        last_resize = now;
      }
    } else if (rd.action == lending::ResizeAction::WAIT) {
      cluster.stop_job();
      current.clear();
      started = false;
    }
    if (adopt) {
      const PlanCache::Planned planned = plans.plan(offered, capacity);
      current = PlanCache::ranks_of(offered, planned);
      current_step = planned.step_seconds;
      started = false;
    }
    if (!started && !current.empty() && !cluster.job_has_pods()) {
      std::vector<std::pair<std::string, int64_t>> pods;
      for (const reconciler::DiscoveredRank& rank : current) pods.emplace_back(rank.node, rank.gpus);
      cluster.start_job(pods);
      started = true;
      r.max_world = std::max<int64_t>(r.max_world, int64_t(current.size()));
    }
  }
  r.used_fraction = r.idle_gpu_hours > 0 ? r.lent_gpu_hours / r.idle_gpu_hours : 0;
  r.throughput_gain = r.samples_alone > 0 ? r.samples / r.samples_alone : 0;
  r.plans = plans.plans();
  r.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  return r;
}

}  // namespace qsync::lending_sim
