// File: planner/local_plan.cpp
// The AllocationRequest for a job's local pool (see local_plan.h).
#include "planner/local_plan.h"

#include <algorithm>
#include <set>
#include <stdexcept>

#include "kernels/device_class.h"

namespace qsync {

std::string local_run_class(const std::string& requested) {
  if (is_estimated_gpu_class(requested)) return requested;
  return device_class_fallback(device_class_by_name(requested)).name;
}

int64_t local_batch_of(const JobSpec& job, size_t rank) {
  const LocalWorkerSpec& w = job.local_workers.at(rank);
  if (w.local_batch > 0) return w.local_batch;
  const int64_t world = int64_t(job.local_workers.size());
  return std::max<int64_t>(1, job.global_batch / world + (int64_t(rank) < job.global_batch % world ? 1 : 0));
}

bool strategy_uses_indicator(const std::string& strategy) { return strategy == "exact" || strategy == "greedy"; }

LocalPlanRequest local_plan_request(const JobSpec& job, const ProfileStore& store, const LocalPlanOptions& o) {
  if (job.local_workers.empty())
    throw std::invalid_argument(job.source + ": spec.pool.local lists no workers; a local plan needs local workers");
  LocalPlanRequest out;
  out.strategy = o.strategy.empty() ? job.allocator : o.strategy;
  AllocationRequest& req = out.request;
  req.model = model_desc_find(job.model);
  req.global_batch = job.global_batch;
  req.high = layer_precision_from_name(o.high.empty() ? job.precision : o.high);
  req.low = layer_precision_from_name(o.low.empty() ? job.low_precision : o.low);
  req.step_time_target = o.step_time_target > 0 ? o.step_time_target : job.step_time_target_seconds;
  req.allow_batch_moves = o.batch_moves.value_or(job.batch_moves);
  req.bucket_bytes = o.bucket_bytes;
  for (size_t r = 0; r < job.local_workers.size(); ++r) {
    const LocalWorkerSpec& w = job.local_workers[r];
    PoolRank p;
    try {
      p.device_class = local_run_class(w.device_class);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(job.source + ": spec.pool.local[" + std::to_string(r) + "].deviceClass: " + e.what());
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
  req.comm = store.comm(int(job.local_workers.size()));
  const std::string calibration = o.calibration.empty() ? job.calibration : o.calibration;
  const std::string kind = o.indicator_kind.empty() ? job.indicator : o.indicator_kind;
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
  for (size_t r = 0; r < job.local_workers.size(); ++r) {
    const std::string cls = local_run_class(job.local_workers[r].device_class);
    if (is_estimated_gpu_class(cls)) continue;
    const int64_t batch = local_batch_of(job, r);
    if (!seen.insert({cls, batch}).second) continue;
    const bool have = std::any_of(store.measured().begin(), store.measured().end(), [&](const DeviceProfile& p) {
      return p.device_class == cls && p.model_hash == model.hash && p.batch == batch;
    });
    if (!have) out.push_back({cls, batch, job.local_workers[r].threads});
  }
  return out;
}

}  // namespace qsync
