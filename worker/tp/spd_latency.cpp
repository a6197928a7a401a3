// File: worker/tp/spd_latency.cpp
// Decode latency of an SPD plan: one rank's decode compute timed in process (one shard of the
// layout, summing over itself), the cost of one decode all-reduce from the user's figure, a
// communication profile or the estimate (plus an emulated link), and the prediction TP vs planned.
// Formulas: worker/tp/spd_latency.h.
#include "worker/tp/spd_latency.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <stdexcept>

#include "planner/device_profile.h"
#include "planner/median.h"
#include "worker/dist/link_model.h"
#include "worker/tp/tp_transformer.h"

namespace qsync {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string microseconds(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f us", seconds * 1e6);
  return text;
}

}  // namespace

SpdDecodeTiming spd_time_decode(const TransformerWeights& weights, const TpLayout& layout, int rounds) {
  if (rounds < 1) throw std::invalid_argument("spd_time_decode: rounds must be at least 1");
  const int64_t L = int64_t(weights.blocks.size());
  // One shard whose reductions sum over itself: the arithmetic of one rank, no communication.
  TpTransformer shard(weights, layout, {0}, tp_reducer_in_process());
  std::vector<double> block_start(size_t(L), 0.0);
  shard.set_block_input_observer([&](int64_t b, const float*, int64_t) { block_start[size_t(b)] = now_seconds(); });
  std::vector<double> token_times, block_times;
  for (int round = 0; round <= rounds; ++round) {  // round 0 warms up
    shard.reset(1);
    for (int64_t t = 0; t < shard.max_tokens(); ++t) {
      const std::vector<int32_t> token = {int32_t((t * 7 + 3) % shard.vocab())};
      shard.forward(token, 1);
      if (round == 0) continue;
      const TpForwardTimes& times = shard.last_times();
      token_times.push_back(times.total_seconds - times.allreduce_seconds);
      for (int64_t b = 0; b + 1 < L; ++b) block_times.push_back(block_start[size_t(b + 1)] - block_start[size_t(b)]);
    }
  }
  SpdDecodeTiming timing;
  timing.tokens = int64_t(token_times.size());
  timing.token_seconds = median_of(token_times);
  // With one block there is no next block to end its interval: the token's time stands for it.
  timing.block_seconds = L > 1 ? median_of(block_times) : timing.token_seconds;
  return timing;
}

SpdAllreduceCost spd_allreduce_cost(double allreduce_us, const std::string& comm_profile, const std::string& link,
                                    int64_t width, int tp_degree) {
  if (allreduce_us >= 0 && !comm_profile.empty())
    throw std::invalid_argument("give the all-reduce cost once: --allreduce-us or --comm-profile, not both");
  const int64_t bytes = width * int64_t(sizeof(float));  // one decode sync: C floats
  SpdAllreduceCost cost;
  if (allreduce_us >= 0) {
    cost.seconds = allreduce_us * 1e-6;
    cost.source = "--allreduce-us";
  } else {
    CommProfile p = comm_profile.empty() ? comm_profile_estimate(tp_degree) : comm_profile_load(comm_profile);
    if (p.world_size != tp_degree) p = comm_profile_rescaled(p, tp_degree);
    cost.seconds = p.seconds(bytes);
    cost.source = (comm_profile.empty() ? std::string("estimate") : comm_profile) + " (" + p.source + ") at " +
                  std::to_string(bytes) + " bytes";
  }
  if (!link.empty()) {
    const LinkModel model = link_model_parse(link);
    if (model.enabled()) {
      const double emulated = link_all_reduce_seconds(model, bytes, tp_degree);
      cost.seconds += emulated;
      cost.source += " + link " + model.describe() + " (" + microseconds(emulated) + ")";
    }
  }
  return cost;
}

SpdDecodePrediction spd_predict_decode(const SpdDecodeTiming& timing, double allreduce_seconds, int64_t blocks,
                                       int64_t dropped) {
  if (dropped < 0 || dropped > blocks)
    throw std::invalid_argument("spd_predict_decode: " + std::to_string(dropped) + " dropped syncs of " +
                                std::to_string(blocks) + " blocks");
  SpdDecodePrediction p;
  p.allreduce_seconds = allreduce_seconds;
  p.block_compute_seconds = timing.block_seconds;
  p.token_compute_seconds = timing.token_seconds;
  p.decode_token_seconds_tp = timing.token_seconds + double(2 * blocks) * allreduce_seconds;
  p.decode_token_seconds_planned = timing.token_seconds + double(2 * blocks - dropped) * allreduce_seconds;
  p.saving = p.decode_token_seconds_tp > 0 ? 1.0 - p.decode_token_seconds_planned / p.decode_token_seconds_tp : 0.0;
  return p;
}

}  // namespace qsync
