// File: planner/shared_cpu_model.cpp
// The compute span of ranks sharing CPUs and its fit on the profiling world's measured step
// (planner/shared_cpu_model.h).
#include "planner/shared_cpu_model.h"

#include <algorithm>
#include <stdexcept>

#include "planner/median.h"
#include "planner/plan_file.h"

namespace qsync {
namespace {

void check_sharing(const SharedCpus& s, size_t ranks) {
  if (s.cpus <= 0) throw std::invalid_argument("shared CPUs: the ranks share no CPUs; give the machine's CPU count");
  if (s.threads.size() != ranks)
    throw std::invalid_argument("shared CPUs: " + std::to_string(s.threads.size()) + " thread counts for " +
                                std::to_string(ranks) + " ranks; give one per rank");
  for (int t : s.threads)
    if (t < 1)
      throw std::invalid_argument("shared CPUs: a rank computes on " + std::to_string(t) + " threads; at least 1");
}

double slowest_compute(const StepPrediction& p) {
  double c = 0;
  for (const RankPrediction& r : p.ranks) c = std::max(c, r.compute_seconds);
  return c;
}

// max(C_max, sum_r C_r * threads_r / cpus): the span before work_scale.
double unscaled_span(const StepPrediction& p, const SharedCpus& s) {
  check_sharing(s, p.ranks.size());
  double work = 0;
  for (size_t r = 0; r < p.ranks.size(); ++r) work += p.ranks[r].compute_seconds * double(s.threads[r]);
  return std::max(slowest_compute(p), work / double(s.cpus));
}

}  // namespace

double shared_compute_span(const StepPrediction& p, const SharedCpus& s) { return s.work_scale * unscaled_span(p, s); }

void share_cpus(StepPrediction& p, const SharedCpus& s) {
  const double moved = shared_compute_span(p, s) - slowest_compute(p) - p.jitter_seconds;
  p.step_seconds += moved;
  p.jitter_seconds = 0;
  for (RankPrediction& r : p.ranks) {
    r.step_seconds += moved;
    r.wait_seconds = std::max(0.0, r.wait_seconds + moved);
  }
}

std::optional<SharedCpus> shared_cpus_fit(const ModelDesc& model, const std::vector<const DeviceProfile*>& pool,
                                          const std::vector<int>& threads, int cpus, const CommProfile& comm,
                                          int64_t bucket_bytes, const std::string& world) {
  SharedCpus s{cpus, threads, 1.0, 1.0};
  check_sharing(s, pool.size());
  if (pool.size() < 2) return std::nullopt;
  std::vector<double> measured;
  std::vector<ReplayRank> uniform;
  for (const DeviceProfile* p : pool) {
    if (p == nullptr) throw std::invalid_argument("shared_cpus_fit: a rank has no device profile");
    if (p->world_size == int(pool.size()) && p->world_signature == world && p->world_step_seconds > 0)
      measured.push_back(p->world_step_seconds);
    ReplayRank r{p, plan_uniform(model, LayerPrecision::FP32)};
    r.plan.local_batch = p->batch;
    uniform.push_back(r);
  }
  if (measured.empty()) return std::nullopt;
  const double world_step = median_of(measured);
  const StepPrediction replayed = replay_step(model, uniform, comm, bucket_bytes);
  const double tail = replayed.step_seconds - replayed.jitter_seconds - slowest_compute(replayed);
  const double span = unscaled_span(replayed, s);
  if (!(span > 0) || !(world_step > tail) || !(replayed.step_seconds > 0)) return std::nullopt;
  s.work_scale = (world_step - tail) / span;
  s.uniform_ratio = world_step / replayed.step_seconds;
  return s;
}

}  // namespace qsync
