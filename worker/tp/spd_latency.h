// File: worker/tp/spd_latency.h
// The decode latency an SPD plan predicts: one rank's compute per decode token (measured in process
// by running one shard of the layout, its reductions over itself only, so the time is one rank's
// arithmetic), plus the all-reduce cost of one decode sync (C floats) times the syncs left:
//   decode_token(TP)      = compute + 2 L * allreduce
//   decode_token(planned) = compute + (2 L - dropped) * allreduce,   saving = 1 - planned / TP
// The all-reduce cost comes from --allreduce-us, or a communication profile
// (planner/device_profile.h CommProfile, written by `qsync-bench-allreduce --comm-profile`, rescaled
// to the TP degree when measured at another world size), or else the planner's estimate; an
// optional emulated link (worker/dist/link_model.h) adds its time on top.
#pragma once

#include <cstdint>
#include <string>

#include "worker/tp/transformer_weights.h"

namespace qsync {

struct SpdDecodeTiming {
  double token_seconds = 0;  // one rank, one decode token, reductions excluded (median)
  double block_seconds = 0;  // one rank, one block of one decode token (median over blocks and tokens)
  int64_t tokens = 0;        // decode tokens timed
};
// Times `rounds` passes of decoding a whole context, one token at a time, after one warm-up pass.
SpdDecodeTiming spd_time_decode(const TransformerWeights& weights, const TpLayout& layout, int rounds = 3);

struct SpdAllreduceCost {
  double seconds = 0;
  std::string source;  // where the figure came from, for the report
};
// allreduce_us >= 0: that figure; else comm_profile (a file) when not empty; else the estimate.
// Both given throws std::invalid_argument. link: "" or a --link spec, added on top.
SpdAllreduceCost spd_allreduce_cost(double allreduce_us, const std::string& comm_profile, const std::string& link,
                                    int64_t width, int tp_degree);

struct SpdDecodePrediction {
  double allreduce_seconds = 0, block_compute_seconds = 0, token_compute_seconds = 0;
  double decode_token_seconds_tp = 0, decode_token_seconds_planned = 0;
  double saving = 0;  // 1 - planned / tp
};
SpdDecodePrediction spd_predict_decode(const SpdDecodeTiming& timing, double allreduce_seconds, int64_t blocks,
                                       int64_t dropped);

}  // namespace qsync
