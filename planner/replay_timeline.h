// File: planner/replay_timeline.h
// The replayer's building blocks, shared with the allocator (which evaluates thousands of
// candidate plans and so works on per-leaf time arrays instead of plans and profiles):
//   - leaf parameter counts and the gradient buckets of a model (leaf granularity, in the
//     worker's order: reverse forward order, a new bucket once the current one holds at least
//     bucket_bytes of FP32 gradients);
//   - one rank's timeline from its per-leaf forward/backward seconds (backward end, the time each
//     bucket's gradients are all ready);
//   - the gradient copies into and out of the buckets (a multi-rank step's compute-thread work);
//   - the all-reduce chain on the communication stream;
//   - the small all-reduce that ends every multi-rank step.
// Profiles are scaled to a rank's local batch by device_profile_scaled (planner/device_profile.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "planner/device_profile.h"
#include "planner/model_desc.h"

namespace qsync {

// A leaf's parameters: its own plus its children's (an attention leaf owns qkv and proj).
int64_t leaf_parameter_count(const LayerDesc& leaf);

struct GradientBucket {
  int64_t bytes = 0;      // FP32 gradients: 4 bytes per parameter
  size_t first_leaf = 0;  // the smallest forward index among its leaves: its backward ends last
};

// Buckets in all-reduce order (the first holds the last layers' gradients). `leaf_params[i]` is
// leaf i's parameter count (forward order); leaves without parameters join no bucket.
std::vector<GradientBucket> gradient_buckets(const std::vector<int64_t>& leaf_params, int64_t bucket_bytes);

// A multi-rank step copies every gradient twice on the compute thread (worker/dist/
// gradient_sync.cpp): into its bucket when the bucket's last gradient is ready (before the bucket
// is handed to the communication thread), and back out after the last all-reduce (before the
// optimizer). Priced by the profile's (FP32, FP32) copy cost, a * elements + b (0 when the
// profile predates it). No buckets (one rank): no copies.
struct GradientCopies {
  std::vector<double> into_bucket;  // per bucket: seconds, added to its first_leaf's backward
  double out_of_buckets = 0;        // seconds, after the all-reduce chain
};
GradientCopies gradient_copy_seconds(const DeviceProfile& p, const std::vector<GradientBucket>& buckets);
// Adds the copies into the buckets to `backward` (per leaf, forward order).
void add_bucket_copies(std::vector<double>& backward, const std::vector<GradientBucket>& buckets, const GradientCopies& c);

struct RankTimeline {
  double forward_end = 0;
  double backward_end = 0;          // forward + backward: the compute stream's end before the optimizer
  std::vector<double> bucket_ready;  // per bucket: when its last gradient is ready
};

// Forward over leaves 0..n-1, then backward n-1..0; leaf i's gradients are ready when its
// backward ends.
RankTimeline rank_timeline(const std::vector<double>& forward, const std::vector<double>& backward,
                           const std::vector<GradientBucket>& buckets);

// The end of the last all-reduce: bucket k starts at max(ready[k], end of bucket k-1) and takes
// comm.seconds(bytes). `ready` is per bucket (for several ranks: the max over ranks). With
// `peers_ready` (per bucket, the second latest over the ranks) a bucket whose last rank came
// after its peers had waited for it takes comm.seconds_after(bytes, how long they waited). 0
// when there are no buckets.
double allreduce_chain_end(const std::vector<double>& ready, const std::vector<GradientBucket>& buckets,
                           const CommProfile& comm, const std::vector<double>* peers_ready = nullptr);

// E[max_r X_r] for independent X_r ~ N(mean[r], sd[r]^2), by Clark's moment matching (exact for
// two variables; the standard approximation beyond, folding one variable in at a time). With
// equal means and spreads s it is mean + s / sqrt(pi) for two; far apart, the larger mean.
double expected_max_of_normals(const std::vector<double>& mean, const std::vector<double>& sd);

// After the optimizer, every step of a multi-rank job ends with one small all-reduce: the global
// loss, accuracy and stop flag, 4 doubles (worker/trainer.cpp). It starts when the slowest rank
// arrives, so every rank's step ends together. Its time: comm.seconds(32 B), or the measured
// cost of a late arrival at a small all-reduce (CommProfile::late_sync_seconds) when larger; 0
// for one rank.
inline constexpr int64_t STEP_STATS_ALLREDUCE_BYTES = 4 * 8;
double step_stats_seconds(const CommProfile& comm, size_t ranks);

}  // namespace qsync
