// File: planner/local_plan.cpp
// The AllocationRequest for a job's local pool (see local_plan.h).
#include "planner/local_plan.h"

#include <algorithm>
#include <set>
#include <stdexcept>

#include "kernels/device_class.h"
#include "planner/allocator_model.h"

namespace qsync {

std::string local_run_class(const std::string& requested) {
  if (is_estimated_gpu_class(requested)) return requested;
  return device_class_fallback(device_class_by_name(requested)).name;
}

int64_t local_batch_of(const JobSpec& job, size_t rank) {
  const LocalWorker& w = job.pool.local.at(rank);
  if (w.local_batch > 0) return w.local_batch;
  const int64_t world = int64_t(job.pool.local.size());
  return std::max<int64_t>(1, job.global_batch / world + (int64_t(rank) < job.global_batch % world ? 1 : 0));
}

bool strategy_uses_indicator(const std::string& strategy) { return strategy == "exact" || strategy == "greedy"; }

LocalPlanRequest local_plan_request(const JobFile& file, const ProfileStore& store, const LocalPlanOptions& o) {
  const JobSpec& job = file.spec;
  const std::vector<std::string> problems = job_file_local_problems(file);
  if (!problems.empty()) throw std::invalid_argument(file.source + ": " + problems.front());
  LocalPlanRequest out;
  out.strategy = o.strategy.empty() ? job.planning.allocator : o.strategy;
  AllocationRequest& req = out.request;
  req.model = model_desc_find(file.model_reference());
  req.global_batch = job.global_batch;
  req.high = layer_precision_from_name(o.high.empty() ? job.planning.precision : o.high);
  req.low = layer_precision_from_name(o.low.empty() ? job.planning.low_precision : o.low);
  req.step_time_target = o.step_time_target > 0 ? o.step_time_target : job.planning.step_time_target_seconds;
  req.allow_batch_moves = o.batch_moves.value_or(job.planning.batch_moves);
  req.bucket_bytes = o.bucket_bytes;
  for (size_t r = 0; r < job.pool.local.size(); ++r) {
    const LocalWorker& w = job.pool.local[r];
    PoolRank p;
    try {
      p.device_class = local_run_class(w.device_class);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(file.source + ": spec.pool.local[" + std::to_string(r) + "].deviceClass: " + e.what());
    }
    if (p.device_class != w.device_class)
      out.notes.push_back("rank " + std::to_string(r) + ": " + w.device_class + " is not available on this CPU; planned as " +
                          p.device_class);
    p.memory_budget_bytes = w.memory_budget_bytes;
    p.node = "local";
    p.local_batch = w.local_batch;
    if (!w.precision.empty()) p.precision = layer_precision_from_name(w.precision);
    p.profile = store.find(req.model, p.device_class, local_batch_of(job, r));
    req.pool.push_back(std::move(p));
  }
  req.comm = store.comm(int(job.pool.local.size()));
  const std::string calibration = o.calibration.empty() ? file.resolve(job.planning.calibration) : o.calibration;
  const std::string kind = o.indicator_kind.empty() ? job.planning.indicator : o.indicator_kind;
  if (!calibration.empty()) {
    const CalibrationStats stats = calibration_stats_load(calibration);
    calibration_stats_check(stats, req.model);
    req.indicator = indicator_table(stats, kind == "weight-error" ? IndicatorKind::WEIGHT_ERROR : IndicatorKind::BIDIRECTIONAL);
    out.indicator_source = kind + " (" + calibration + ")";
  } else {
    req.indicator = indicator_fallback_table(req.model);
    out.indicator_source = "fallback";
  }
  return out;
}

std::vector<ProfileNeed> local_missing_profiles(const JobSpec& job, const ModelDesc& model, const ProfileStore& store) {
  std::vector<ProfileNeed> out;
  std::set<std::pair<std::string, int64_t>> seen;
  for (size_t r = 0; r < job.pool.local.size(); ++r) {
    const std::string cls = local_run_class(job.pool.local[r].device_class);
    if (is_estimated_gpu_class(cls)) continue;
    const int64_t batch = local_batch_of(job, r);
    if (!seen.insert({cls, batch}).second) continue;
    const bool have = std::any_of(store.measured().begin(), store.measured().end(), [&](const DeviceProfile& p) {
      return p.device_class == cls && p.model_hash == model.hash && p.batch == batch;
    });
    if (!have) out.push_back({cls, batch, int(job.pool.local[r].threads)});
  }
  return out;
}

std::vector<std::string> local_memory_budget_problems(const JobFile& file, const ModelDesc& model) {
  std::vector<std::string> problems;
  const JobSpec& job = file.spec;
  for (size_t r = 0; r < job.pool.local.size(); ++r) {
    const LocalWorker& w = job.pool.local[r];
    if (w.memory_budget_bytes <= 0) continue;
    // The byte counts of the datasheet estimate are the model's own (weights, gradients,
    // optimizer state, saved activations per precision), whatever the device: no measurement.
    AllocationRequest req;
    req.model = model;
    req.global_batch = job.global_batch;
    PoolRank p;
    try {
      p.device_class = local_run_class(w.device_class);
    } catch (const std::exception&) {
      continue;  // an unknown class: reported by the class check
    }
    p.local_batch = local_batch_of(job, r);
    p.profile = device_profile_estimate(model, estimated_gpu_classes().front(), p.local_batch);
    p.memory_budget_bytes = w.memory_budget_bytes;
    req.pool.push_back(std::move(p));
    req.comm = comm_profile_estimate(1);
    try {
      RankModel rank = job_model(req, {local_batch_of(job, r)}).ranks.at(0);
      rank.rank = r;
      check_memory_feasible(rank);
    } catch (const InfeasiblePlan& e) {
      problems.push_back("spec.pool.local[" + std::to_string(r) + "].memoryBudget " + w.memory_budget + ": " + e.what());
    }
  }
  return problems;
}

}  // namespace qsync
