// File: worker/tp/tp_transformer.h
// Megatron-style tensor-parallel inference of a causal transformer, with Sync-Point Drop.
// One class runs any subset of the ranks' shards: a real rank owns one shard and sums over ranks
// with the project's collectives (Gloo here, NCCL on GPUs); the exact single-process simulation of
// N ranks owns all N shards and sums in process, in rank order. The arithmetic per shard is the
// same code in both, so the simulation is what planning and distillation run, and a test checks it
// against the multi-process run.
//
// Per block b, rank i (X the replicated block input, (M, C) with M = B * T_new rows):
//   Y_i = Attn_i(LN1(X))            local heads (QKV column-parallel), W_O row-parallel, no bias
//   sync kept:  H   = X + AllReduce(Y_i) + b_O
//               out = H + AllReduce(Z_i) + b_fc2,        Z_i = MLP_i(LN2(H))   (fc1 column-, fc2 row-parallel)
//   SPD (drop): H_i = X + Y_i + b_O                       (this rank's heads only)
//               out = X + AllReduce(Y_i + Z_i) + b_O + b_fc2,   Z_i = MLP_i(LN2(H_i))
// so an SPD block keeps the exact attention sum in its output and only the MLP input is
// approximate. Norms run locally on every rank; row-parallel biases are added once, after the sum.
// Each rank keeps a KV cache of its own heads: prefill appends a prompt, decode one token at a time.
//
//   TpTransformer sim = tp_simulation(weights, tp_layout_contiguous(weights, 2));
//   sim.set_dropped({false, true, true, true});
//   sim.reset(/*batch=*/1);
//   std::vector<float> logits = sim.forward(prompt, 1);    // (1, T, V)
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "worker/tp/transformer_weights.h"

namespace qsync {

class Collectives;

// Sums each shard's buffer over all ranks, in place: every buffer ends holding the sum. A rank with
// one shard calls the collective; the simulation adds its N buffers in rank order.
class TpReducer {
 public:
  virtual ~TpReducer() = default;
  virtual void all_reduce_sum(const std::vector<float*>& shard_buffers, int64_t count) = 0;
};
std::unique_ptr<TpReducer> tp_reducer_collective(Collectives& coll);
std::unique_ptr<TpReducer> tp_reducer_in_process();

// Time of one forward call, split (the benchmark's all-reduce share).
struct TpForwardTimes {
  double total_seconds = 0;
  double allreduce_seconds = 0;  // inside the reducer
  int64_t allreduces = 0;        // reducer calls
};

class TpTransformer {
 public:
  // Owns the shards of `ranks` (each in 0..layout.ranks-1). Copies what the shards need from
  // `weights`. Throws std::invalid_argument when the layout does not fit the weights.
  TpTransformer(const TransformerWeights& weights, const TpLayout& layout, std::vector<int> ranks,
                std::unique_ptr<TpReducer> reducer);
  ~TpTransformer();
  TpTransformer(TpTransformer&&) noexcept;
  TpTransformer& operator=(TpTransformer&&) noexcept;

  int tp_degree() const;   // layout.ranks
  int64_t blocks() const;  // L
  int64_t vocab() const;
  int64_t max_tokens() const;
  int64_t width() const;   // C

  // Which blocks drop their attention sync (size L; all false = plain TP). Default: none.
  void set_dropped(const std::vector<bool>& dropped);
  const std::vector<bool>& dropped() const;

  // Empties the KV caches and sizes them for `batch` sequences of up to max_tokens() tokens.
  void reset(int64_t batch);
  int64_t cached_tokens() const;  // tokens already in the cache (per sequence)

  // Appends tokens (batch, T_new) row-major (the batch given to reset) at positions
  // cached_tokens().. and returns the logits (batch, T_new, V), identical on every rank. Throws
  // std::invalid_argument when the cache would pass max_tokens() or a token is outside 0..V-1.
  std::vector<float> forward(const std::vector<int32_t>& tokens, int64_t batch);
  const TpForwardTimes& last_times() const;

  // Called during forward with each block's input X (M, C) (the replicated residual stream),
  // before the block runs: calibration inputs for distillation and head grouping. nullptr: off.
  using BlockInputObserver = std::function<void(int64_t block, const float* x, int64_t rows)>;
  void set_block_input_observer(BlockInputObserver observer);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// All N shards in one process (the exact simulation).
TpTransformer tp_simulation(const TransformerWeights& weights, const TpLayout& layout);
// One rank of a real N-rank job: shard coll.rank() of `layout`, summing with `coll`. Throws when
// coll.world_size() != layout.ranks.
TpTransformer tp_rank(const TransformerWeights& weights, const TpLayout& layout, Collectives& coll);

// Held-out quality of next-token prediction over `tokens` split into windows of `window` tokens
// (each window scored from an empty cache, in one prefill; at most `max_windows`, 0 = all). Window
// k starts at k * stride (0: `window`, consecutive text); a stride of window + 1 scores windows that
// each carry their own last target (char_heldout_windows' parts).
struct TpQuality {
  double loss = 0;          // mean cross-entropy (nats) over scored positions
  double perplexity = 0;    // exp(loss)
  double accuracy = 0;      // next-token argmax accuracy
  int64_t positions = 0;
  // Per window, in window order (every window scores the same number of positions, so their
  // means are loss and accuracy): what a paired comparison of two evaluations needs.
  std::vector<double> window_loss, window_accuracy;
};
inline constexpr int64_t TP_EVALUATE_BATCH = 8;  // windows per forward
TpQuality tp_evaluate(TpTransformer& model, const std::vector<int32_t>& tokens, int64_t window,
                      int64_t max_windows = 0, int64_t batch = TP_EVALUATE_BATCH, int64_t stride = 0);

}  // namespace qsync
