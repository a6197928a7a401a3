// File: planner/replayer.cpp
// One synchronous data-parallel step, replayed from device profiles (planner/replayer.h).
//
// Per rank, on the compute stream: forward over the model's leaf layers in order, backward in
// reverse, then the optimizer step. A GEMM leaf (linear, conv2d) costs its planned precision's
// profiled seconds; those include the layer's own casts (input quantization, weight and saved
// tensor casts: in our engine every layer's output is FP32, so a GEMM layer's input always
// arrives in FP32 and the layer casts it itself, inside its measured time). An attention leaf
// costs its qkv and proj GEMMs at their planned precisions plus its FP32 core (the profile's
// other_layers entry under the attention's name, if any). Other leaves cost their FP32 entry
// (absent entries, e.g. a free flatten, cost nothing).
//
// Gradients: a leaf's parameters are ready when its backward ends; buckets (replay_timeline.h)
// are all-reduced on a communication stream: bucket k starts at max(every rank's ready time of k,
// end of bucket k-1) and lasts comm.seconds(bytes) (one rank: no all-reduce, as the worker), or
// less when its last rank arrives after the others had waited (comm.seconds_after).
// With several ranks the compute thread copies each bucket's gradients in when the bucket is
// complete (part of its last leaf's backward) and all of them back out after the last all-reduce
// (gradient_copy_seconds). The optimizer runs after that, then the step's small stats all-reduce
// (step_stats_seconds) starts when the slowest rank arrives:
//   end(rank)       = max(backward end(rank), last all-reduce end) + copy out + optimizer(rank)
//   step end        = max over ranks of end(rank) + stats all-reduce    (one rank: its end)
//   wait(rank)      = max(0, last all-reduce end - backward end(rank)) + copy out
// Step-to-step spread (the profiles' step_jitter, relative to a rank's backward end) adds the
// expected latest arrival beyond the latest mean (expected_max_of_normals) to the step and to
// every rank's wait: StepPrediction::jitter_seconds.
//   compute(rank)   = forward + backward + optimizer
// Memory, at its peak at the end of the forward pass: static bytes + saved activations of every
// leaf (scaled linearly to the local batch) + the GEMM layers' low-precision weight copies.
// Pools whose ranks share CPUs: planner/shared_cpu_model.h.
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "planner/plan_file.h"
#include "planner/replay_timeline.h"
#include "planner/replayer.h"

namespace qsync {
namespace {

std::string rank_name(size_t r, const DeviceProfile& p) {
  return "rank " + std::to_string(r) + " (" + (p.device_class.empty() ? "unnamed class" : p.device_class) + ")";
}

const LayerCost& gemm_cost(const DeviceProfile& p, const std::string& layer, LayerPrecision prec, size_t r) {
  auto it = p.gemm_layers.find(layer);
  if (it == p.gemm_layers.end())
    throw std::invalid_argument(rank_name(r, p) + ": the profile has no costs for GEMM layer '" + layer +
                                "' of model " + p.model + "; profile this model on the class (qsync-worker profile)");
  auto c = it->second.find(prec);
  if (c == it->second.end()) {
    std::string have;
    for (const auto& [q, cost] : it->second) have += std::string(have.empty() ? "" : ", ") + layer_precision_name(q);
    throw std::invalid_argument(rank_name(r, p) + ": layer '" + layer + "' is planned at " + layer_precision_name(prec) +
                                ", which the class's profile does not have (it has: " + have +
                                "); plan one of those precisions for this class");
  }
  return c->second;
}

struct LeafCosts {
  std::vector<double> forward, backward;  // backward includes the copies into the buckets
  int64_t memory = 0;  // static + saved + weight copies
  double optimizer = 0;
  double copy_out = 0;  // the gradients back out of the buckets, after the all-reduce chain
};

LeafCosts leaf_costs(const std::vector<const LayerDesc*>& leaves, const DeviceProfile& p, const RankPlan& plan, size_t r,
                     const std::vector<GradientBucket>& buckets) {
  LeafCosts out;
  out.forward.assign(leaves.size(), 0.0);
  out.backward.assign(leaves.size(), 0.0);
  out.memory = p.static_bytes + p.step_overhead_bytes;
  out.optimizer = p.optimizer_seconds;
  auto add = [&](size_t i, const LayerCost& c) {
    out.forward[i] += c.forward_seconds;
    out.backward[i] += c.backward_seconds;
    out.memory += c.saved_bytes + c.weight_bytes;
  };
  for (size_t i = 0; i < leaves.size(); ++i) {
    const LayerDesc& l = *leaves[i];
    if (l.kind == LayerKind::LINEAR || l.kind == LayerKind::CONV2D) {
      add(i, gemm_cost(p, l.name, plan.precision_of(l.name), r));
      continue;
    }
    if (auto it = p.other_layers.find(l.name); it != p.other_layers.end()) add(i, it->second);
    for (const LayerDesc& c : l.children)  // attention: qkv and proj
      if (c.kind == LayerKind::LINEAR || c.kind == LayerKind::CONV2D) add(i, gemm_cost(p, c.name, plan.precision_of(c.name), r));
  }
  if (!leaves.empty()) out.forward[0] += p.step_overhead_seconds;  // before the first layer (device_profile.h)
  const GradientCopies copies = gradient_copy_seconds(p, buckets);
  add_bucket_copies(out.backward, buckets, copies);
  out.copy_out = copies.out_of_buckets;
  return out;
}

}  // namespace

int64_t leaf_parameter_count(const LayerDesc& leaf) {
  int64_t n = leaf.parameter_count;
  for (const LayerDesc& c : leaf.children) n += leaf_parameter_count(c);
  return n;
}

GradientCopies gradient_copy_seconds(const DeviceProfile& p, const std::vector<GradientBucket>& buckets) {
  GradientCopies c;
  const auto it = p.casts.find({Precision::FP32, Precision::FP32});
  int64_t total = 0;
  for (const GradientBucket& b : buckets) {
    c.into_bucket.push_back(it == p.casts.end() ? 0.0 : std::max(0.0, it->second.at(b.bytes / 4)));
    total += b.bytes;
  }
  if (it != p.casts.end() && !buckets.empty()) c.out_of_buckets = std::max(0.0, it->second.at(total / 4));
  return c;
}

void add_bucket_copies(std::vector<double>& backward, const std::vector<GradientBucket>& buckets, const GradientCopies& c) {
  for (size_t k = 0; k < buckets.size() && k < c.into_bucket.size(); ++k) backward.at(buckets[k].first_leaf) += c.into_bucket[k];
}

std::vector<GradientBucket> gradient_buckets(const std::vector<int64_t>& leaf_params, int64_t bucket_bytes) {
  if (bucket_bytes <= 0) throw std::invalid_argument("gradient bucket size must be positive (DDP's default is 25 MiB)");
  std::vector<GradientBucket> out;
  for (size_t i = leaf_params.size(); i-- > 0;) {
    if (leaf_params[i] <= 0) continue;
    if (out.empty() || out.back().bytes >= bucket_bytes) out.emplace_back();
    out.back().bytes += 4 * leaf_params[i];
    out.back().first_leaf = i;
  }
  return out;
}

RankTimeline rank_timeline(const std::vector<double>& forward, const std::vector<double>& backward,
                           const std::vector<GradientBucket>& buckets) {
  RankTimeline t;
  for (double f : forward) t.forward_end += f;
  std::vector<double> ready(forward.size(), 0.0);
  double now = t.forward_end;
  for (size_t i = backward.size(); i-- > 0;) {
    now += backward[i];
    ready[i] = now;
  }
  t.backward_end = now;
  t.bucket_ready.reserve(buckets.size());
  for (const GradientBucket& b : buckets) t.bucket_ready.push_back(ready[b.first_leaf]);
  return t;
}

double allreduce_chain_end(const std::vector<double>& ready, const std::vector<GradientBucket>& buckets,
                           const CommProfile& comm, const std::vector<double>* peers_ready) {
  double end = 0;
  for (size_t k = 0; k < buckets.size(); ++k) {
    // The peers wait from their arrival, or from the end of the bucket before (their links busy
    // until then), to the last rank's arrival.
    const double lead = peers_ready == nullptr ? 0.0 : ready[k] - std::max(end, (*peers_ready)[k]);
    end = std::max(end, ready[k]) + comm.seconds_after(buckets[k].bytes, lead);
  }
  return end;
}

double expected_max_of_normals(const std::vector<double>& mean, const std::vector<double>& sd) {
  if (mean.empty()) return 0;
  double m = mean[0], v = sd[0] * sd[0];
  for (size_t i = 1; i < mean.size(); ++i) {
    const double m2 = mean[i], v2 = sd[i] * sd[i];
    const double theta = std::sqrt(v + v2);
    if (!(theta > 0)) {
      if (m2 > m) m = m2, v = v2;
      continue;
    }
    const double a = (m - m2) / theta;
    const double cdf = 0.5 * std::erfc(-a / std::sqrt(2.0)), pdf = std::exp(-0.5 * a * a) / std::sqrt(2.0 * M_PI);
    const double first = m * cdf + m2 * (1 - cdf) + theta * pdf;
    const double second = (m * m + v) * cdf + (m2 * m2 + v2) * (1 - cdf) + (m + m2) * theta * pdf;
    m = first;
    v = std::max(0.0, second - first * first);
  }
  return m;
}

double step_stats_seconds(const CommProfile& comm, size_t ranks) {
  if (ranks <= 1) return 0.0;
  return std::max(comm.seconds(STEP_STATS_ALLREDUCE_BYTES), comm.late_sync_seconds);
}

StepPrediction replay_step(const ModelDesc& model, const std::vector<ReplayRank>& ranks, const CommProfile& comm,
                           int64_t bucket_bytes) {
  if (ranks.empty()) throw std::invalid_argument("replay_step needs at least one rank");
  const std::vector<const LayerDesc*> leaves = model_leaf_layers(model);
  std::vector<int64_t> params;
  for (const LayerDesc* l : leaves) params.push_back(leaf_parameter_count(*l));
  // One rank does not synchronize (the worker skips the gradient sync in a world of one).
  const std::vector<GradientBucket> buckets =
      ranks.size() > 1 ? gradient_buckets(params, bucket_bytes) : std::vector<GradientBucket>{};

  std::vector<LeafCosts> costs;
  std::vector<RankTimeline> lines;
  std::vector<double> ready(buckets.size(), 0.0), peers_ready(buckets.size(), 0.0), jitter;
  for (size_t r = 0; r < ranks.size(); ++r) {
    if (ranks[r].profile == nullptr) throw std::invalid_argument("rank " + std::to_string(r) + " has no device profile");
    if (ranks[r].plan.local_batch <= 0)
      throw std::invalid_argument("rank " + std::to_string(r) + "'s plan has no local batch; set RankPlan::local_batch");
    const DeviceProfile scaled = device_profile_scaled(*ranks[r].profile, ranks[r].plan.local_batch);
    jitter.push_back(scaled.step_jitter);
    costs.push_back(leaf_costs(leaves, scaled, ranks[r].plan, r, buckets));
    lines.push_back(rank_timeline(costs.back().forward, costs.back().backward, buckets));
    for (size_t k = 0; k < buckets.size(); ++k) {  // the latest arrival and the one before it
      const double t = lines.back().bucket_ready[k];
      if (r == 0) {
        ready[k] = t;
        peers_ready[k] = -std::numeric_limits<double>::infinity();
        continue;
      }
      peers_ready[k] = std::max(peers_ready[k], std::min(ready[k], t));
      ready[k] = std::max(ready[k], t);
    }
  }
  const double sync_end = allreduce_chain_end(ready, buckets, comm, ranks.size() > 1 ? &peers_ready : nullptr);

  StepPrediction out;
  double slowest_end = 0;
  for (size_t r = 0; r < ranks.size(); ++r) {
    RankPrediction p;
    p.backward_end_seconds = lines[r].backward_end;
    p.compute_seconds = lines[r].backward_end + costs[r].optimizer;
    p.optimizer_seconds = costs[r].optimizer;
    p.wait_seconds = std::max(0.0, sync_end - lines[r].backward_end) + costs[r].copy_out;  // as the worker times it
    p.step_seconds = std::max(lines[r].backward_end, sync_end) + costs[r].copy_out + costs[r].optimizer;
    p.peak_memory_bytes = costs[r].memory;
    slowest_end = std::max(slowest_end, p.step_seconds);
    out.ranks.push_back(p);
  }
  // Each step, every rank waits for the latest arrival at the gradient sync: with step-to-step
  // spread, later on average than the latest mean arrival (most for a balanced pool).
  if (ranks.size() > 1) {
    std::vector<double> mean, sd;
    for (size_t r = 0; r < ranks.size(); ++r) {
      mean.push_back(lines[r].backward_end);
      sd.push_back(jitter[r] * lines[r].backward_end);
    }
    out.jitter_seconds = std::max(0.0, expected_max_of_normals(mean, sd) - *std::max_element(mean.begin(), mean.end()));
    for (RankPrediction& p : out.ranks) p.wait_seconds += out.jitter_seconds;
  }
  // Every rank leaves the step's stats all-reduce together.
  out.step_seconds = slowest_end + out.jitter_seconds + step_stats_seconds(comm, ranks.size());
  if (ranks.size() > 1)
    for (RankPrediction& p : out.ranks) p.step_seconds = out.step_seconds;
  out.allreduce_end_seconds = sync_end;
  return out;
}

RankPrediction replay_profile_fp32_step(const ModelDesc& model, const DeviceProfile& p, int world_size,
                                        int64_t bucket_bytes) {
  if (world_size < 1) throw std::invalid_argument("replay_profile_fp32_step: a world has at least one rank");
  DeviceProfile parts = p;
  parts.step_overhead_seconds = 0;
  parts.step_overhead_bytes = 0;
  ReplayRank whole{&parts, plan_uniform(model, LayerPrecision::FP32)};
  whole.plan.local_batch = p.batch;
  return replay_step(model, std::vector<ReplayRank>(size_t(world_size), whole), CommProfile{}, bucket_bytes).ranks.at(0);
}

}  // namespace qsync
