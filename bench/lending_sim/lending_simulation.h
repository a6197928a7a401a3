// File: bench/lending_sim/lending_simulation.h
// A day of off-peak borrowing at scale, driven by the operator's own logic: the job is a
// HybridTrainingJob manifest parsed as the operator parses it (borrow_sources, elastic_bounds),
// and every reconcile period the simulation observes its cluster model (simulated_cluster.h)
// and calls what the reconciler calls: lending::plan_borrowing (the lending decision and the
// borrowed ranks), pool_capacity + discover_pool (the offered pool), lending::decide_resize
// and growth_pays, and plan_job (the planner: precision per layer and batch per rank for every
// pool the job runs on). Only the effects are the model's: scaling the workload, stopping the
// job (a checkpoint) and starting it at the new world size.
//
// Measured: GPU-hours demand left idle (serving replicas above both what the demand needs, by
// the queueing model without headroom, and minServingReplicas) against GPU-hours lent to the
// job and GPU-hours it trained on; training samples over the day against the training pool
// alone; every reclaim's latency (trigger -> replicas Ready) against reclaimGraceSeconds; the
// serving deficit (Ready replicas below what the demand needs) and its longest stretch.
//
//   SimConfig c;  c.job_manifest = default_job_manifest();
//   const SimReport r = simulate_day(c);   r.used_fraction, r.throughput_gain, r.reclaim_seconds
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/lending_sim/diurnal_demand.h"
#include "bench/lending_sim/simulated_cluster.h"

namespace qsync::lending_sim {

struct SimConfig {
  std::string job_manifest;  // a HybridTrainingJob with one borrowing inference entry
  int64_t inference_nodes = 16, gpus_per_inference_node = 8;
  std::string inference_gpu_product = "NVIDIA-L4";
  int64_t training_nodes = 1, gpus_per_training_node = 4;
  std::string training_gpu_product = "NVIDIA-A100-SXM4-80GB";
  int64_t serving_replicas = 120;  // the workload's replicas, provisioned for the peak
  DiurnalDemandConfig demand;
  SimTimings timings;
  double day_start = 1781222400;  // 2026-06-12T00:00:00Z: the clock the windows see
  double duration_seconds = 86400;
};

// The job the simulation runs: char-gpt on 4 A100s plus what an L4 serving Deployment lends
// (M/M/c sizing: 0.5 s per request, 4 requests at once per replica, p99 wait <= 100 ms,
// 20 % headroom, minServingReplicas 8, reclaimGraceSeconds 300), elastic 4..132 ranks.
std::string default_job_manifest();

struct SimReport {
  double idle_gpu_hours = 0;      // what demand left idle
  double lent_gpu_hours = 0;      // held by the job on inference nodes
  double trained_gpu_hours = 0;   // of those, while the job trained (not stopping or starting)
  double used_fraction = 0;       // lent / idle
  double samples = 0, samples_alone = 0, throughput_gain = 0;  // gain = samples / samples_alone
  double step_seconds_alone = 0;
  std::vector<double> reclaim_seconds;
  int64_t reclaim_misses = 0;
  double reclaim_grace_seconds = 0;
  double longest_deficit_seconds = 0;    // Ready replicas below the demand's need, in a row
  double deficit_replica_seconds = 0;
  int64_t min_ready_replicas = 0, min_serving_replicas = 0;
  int64_t resizes = 0, lends = 0, plans = 0, max_world = 0;
  double wall_seconds = 0;
  // Every 15 simulated minutes: {hour, demand rps, needed, replicas, ready, borrowed GPUs, world}.
  std::vector<std::vector<double>> timeline;

  double reclaim_quantile(double q) const;
  nlohmann::json to_json() const;
  std::string text() const;
  std::string timeline_text() const;
};

// Throws std::invalid_argument for a manifest that is not a valid borrowing job.
SimReport simulate_day(const SimConfig& config);

}  // namespace qsync::lending_sim
