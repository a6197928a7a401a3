// File: worker/tp/tp_transformer.cpp
// The tensor-parallel engine: the replicated parts (embedding, layernorms, row-parallel biases,
// final layernorm and head), the owned shards (tp_block.h), the sync / SPD formulas of
// tp_transformer.h per block, the reducers (collective, in process) and their timing.
#include "worker/tp/tp_transformer.h"

#include <chrono>
#include <stdexcept>

#include "worker/dist/collectives.h"
#include "worker/tp/tp_block.h"

namespace qsync {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Sums the owned buffers in rank order into the first (the in-process part of every reducer).
void sum_into_first(const std::vector<float*>& buffers, int64_t count) {
  float* sum = buffers[0];
  for (size_t s = 1; s < buffers.size(); ++s) {
    const float* p = buffers[s];
    for (int64_t i = 0; i < count; ++i) sum[i] += p[i];
  }
}

void copy_first_to_rest(const std::vector<float*>& buffers, int64_t count) {
  for (size_t s = 1; s < buffers.size(); ++s) std::copy_n(buffers[0], count, buffers[s]);
}

class InProcessReducer : public TpReducer {
 public:
  void all_reduce_sum(const std::vector<float*>& shard_buffers, int64_t count) override {
    if (shard_buffers.empty()) return;
    sum_into_first(shard_buffers, count);
    copy_first_to_rest(shard_buffers, count);
  }
};

class CollectiveReducer : public TpReducer {
 public:
  explicit CollectiveReducer(Collectives& coll) : coll_(coll) {}
  void all_reduce_sum(const std::vector<float*>& shard_buffers, int64_t count) override {
    if (shard_buffers.empty()) return;
    sum_into_first(shard_buffers, count);  // a rank owning several shards adds them first
    coll_.all_reduce_sum(shard_buffers[0], count);
    copy_first_to_rest(shard_buffers, count);
  }

 private:
  Collectives& coll_;
};

// What every rank keeps whole: per block the layernorms and the row-parallel biases.
struct ReplicatedBlock {
  std::vector<float> ln1_gain, ln1_bias, ln2_gain, ln2_bias;  // (C) each
  std::vector<float> proj_bias, fc2_bias;                     // (C) each: added once, after the sum
};

}  // namespace

std::unique_ptr<TpReducer> tp_reducer_collective(Collectives& coll) { return std::make_unique<CollectiveReducer>(coll); }
std::unique_ptr<TpReducer> tp_reducer_in_process() { return std::make_unique<InProcessReducer>(); }

struct TpTransformer::State {
  int ranks = 1;
  int64_t vocab = 0, max_tokens = 0, width = 0;
  std::vector<float> token_embedding, position_embedding;  // (V, C), (T_max, C)
  std::vector<float> lnf_gain, lnf_bias, head_weight, head_bias;  // (C), (C), (V, C), (V)
  std::vector<ReplicatedBlock> blocks;            // L
  std::vector<std::vector<TpBlockShard>> shards;  // [block][owned shard]
  std::unique_ptr<TpReducer> reducer;
  std::vector<bool> dropped;
  int64_t batch = 0, cached = 0;
  TpForwardTimes times;
  BlockInputObserver observer;

  // Sums buffers over ranks, timed.
  void reduce(const std::vector<float*>& buffers, int64_t count) {
    const double t0 = now_seconds();
    reducer->all_reduce_sum(buffers, count);
    times.allreduce_seconds += now_seconds() - t0;
    ++times.allreduces;
  }

  // One block on x (M, C) in place: x becomes the block output.
  void run_block(size_t bi, std::vector<float>& x, int64_t t_new) {
    const ReplicatedBlock& rb = blocks[bi];
    std::vector<TpBlockShard>& owned = shards[bi];
    const int64_t C = width, M = batch * t_new, MC = M * C;
    const size_t S = owned.size();
    std::vector<float> ln(static_cast<size_t>(MC));  // (M, C)
    tp_layernorm(x.data(), rb.ln1_gain.data(), rb.ln1_bias.data(), M, C, ln.data());
    std::vector<std::vector<float>> y(S, std::vector<float>(size_t(MC)));  // Y_i (M, C) per owned shard
    std::vector<std::vector<float>> z(S, std::vector<float>(size_t(MC)));  // Z_i (M, C)
    std::vector<float*> y_ptrs, z_ptrs;
    for (size_t s = 0; s < S; ++s) {
      tp_attention_partial(owned[s], ln.data(), batch, t_new, cached, max_tokens, y[s].data());
      y_ptrs.push_back(y[s].data());
      z_ptrs.push_back(z[s].data());
    }
    if (!dropped[bi]) {
      // H = X + (AllReduce(Y_i) + b_O);  out = H + (AllReduce(Z_i) + b_fc2)
      reduce(y_ptrs, MC);
      std::vector<float>& h = x;  // H replaces X
      for (int64_t m = 0; m < M; ++m)
        for (int64_t c = 0; c < C; ++c) h[size_t(m * C + c)] += y[0][size_t(m * C + c)] + rb.proj_bias[size_t(c)];
      tp_layernorm(h.data(), rb.ln2_gain.data(), rb.ln2_bias.data(), M, C, ln.data());
      for (size_t s = 0; s < S; ++s) tp_mlp_partial(owned[s], ln.data(), M, z[s].data());
      reduce(z_ptrs, MC);
      for (int64_t m = 0; m < M; ++m)
        for (int64_t c = 0; c < C; ++c) h[size_t(m * C + c)] += z[0][size_t(m * C + c)] + rb.fc2_bias[size_t(c)];
      return;
    }
    // SPD: H_i = X + (Y_i + b_O);  out = X + (((AllReduce(Y_i + Z_i) + b_O) + b_fc2)
    std::vector<float> h(static_cast<size_t>(MC));  // H_i (M, C)
    for (size_t s = 0; s < S; ++s) {
      for (int64_t m = 0; m < M; ++m)
        for (int64_t c = 0; c < C; ++c) {
          const size_t i = size_t(m * C + c);
          h[i] = x[i] + (y[s][i] + rb.proj_bias[size_t(c)]);
        }
      tp_layernorm(h.data(), rb.ln2_gain.data(), rb.ln2_bias.data(), M, C, ln.data());
      tp_mlp_partial(owned[s], ln.data(), M, z[s].data());
      for (int64_t i = 0; i < MC; ++i) z[s][size_t(i)] += y[s][size_t(i)];  // Y_i + Z_i
    }
    reduce(z_ptrs, MC);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t c = 0; c < C; ++c) {
        const size_t i = size_t(m * C + c);
        x[i] += (z[0][i] + rb.proj_bias[size_t(c)]) + rb.fc2_bias[size_t(c)];
      }
  }
};

TpTransformer::TpTransformer(const TransformerWeights& weights, const TpLayout& layout, std::vector<int> ranks,
                             std::unique_ptr<TpReducer> reducer)
    : state_(std::make_unique<State>()) {
  tp_layout_check(weights, layout);
  if (ranks.empty()) throw std::invalid_argument("TpTransformer: no rank shards to own; pass at least one rank");
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0 || ranks[i] >= layout.ranks)
      throw std::invalid_argument("TpTransformer: rank " + std::to_string(ranks[i]) + " is outside the layout's " +
                                  std::to_string(layout.ranks) + " ranks");
    for (size_t j = 0; j < i; ++j)
      if (ranks[j] == ranks[i])
        throw std::invalid_argument("TpTransformer: rank " + std::to_string(ranks[i]) + " is listed twice");
  }
  if (!reducer) throw std::invalid_argument("TpTransformer: a reducer is required");
  State& st = *state_;
  st.ranks = layout.ranks;
  st.vocab = weights.vocab;
  st.max_tokens = weights.max_tokens;
  st.width = weights.width;
  st.token_embedding = weights.token_embedding;
  st.position_embedding = weights.position_embedding;
  st.lnf_gain = weights.lnf_gain;
  st.lnf_bias = weights.lnf_bias;
  st.head_weight = weights.head_weight;
  st.head_bias = weights.head_bias;
  for (size_t b = 0; b < weights.blocks.size(); ++b) {
    const BlockWeights& bw = weights.blocks[b];
    st.blocks.push_back({bw.ln1_gain, bw.ln1_bias, bw.ln2_gain, bw.ln2_bias, bw.proj_bias, bw.fc2_bias});
    std::vector<TpBlockShard> owned;
    for (int r : ranks)
      owned.push_back(tp_block_shard(bw, weights.mlp_width, layout.heads_of_rank[b][size_t(r)],
                                     layout.mlp_slice_of_rank[b][size_t(r)], layout.ranks));
    st.shards.push_back(std::move(owned));
  }
  st.reducer = std::move(reducer);
  st.dropped.assign(weights.blocks.size(), false);
}

TpTransformer::~TpTransformer() = default;
TpTransformer::TpTransformer(TpTransformer&&) noexcept = default;
TpTransformer& TpTransformer::operator=(TpTransformer&&) noexcept = default;

int TpTransformer::tp_degree() const { return state_->ranks; }
int64_t TpTransformer::blocks() const { return int64_t(state_->blocks.size()); }
int64_t TpTransformer::vocab() const { return state_->vocab; }
int64_t TpTransformer::max_tokens() const { return state_->max_tokens; }
int64_t TpTransformer::width() const { return state_->width; }

void TpTransformer::set_dropped(const std::vector<bool>& dropped) {
  if (dropped.size() != state_->blocks.size())
    throw std::invalid_argument("set_dropped: " + std::to_string(dropped.size()) + " flags for a model of " +
                                std::to_string(state_->blocks.size()) + " blocks");
  state_->dropped = dropped;
}
const std::vector<bool>& TpTransformer::dropped() const { return state_->dropped; }

void TpTransformer::reset(int64_t batch) {
  if (batch < 1) throw std::invalid_argument("reset: batch must be at least 1, got " + std::to_string(batch));
  state_->batch = batch;
  state_->cached = 0;
  for (auto& owned : state_->shards)
    for (TpBlockShard& s : owned) tp_block_shard_reset(s, batch, state_->max_tokens);
}

int64_t TpTransformer::cached_tokens() const { return state_->cached; }
const TpForwardTimes& TpTransformer::last_times() const { return state_->times; }
void TpTransformer::set_block_input_observer(BlockInputObserver observer) { state_->observer = std::move(observer); }

std::vector<float> TpTransformer::forward(const std::vector<int32_t>& tokens, int64_t batch) {
  State& st = *state_;
  const double t0 = now_seconds();
  st.times = TpForwardTimes{};
  if (st.batch == 0) throw std::logic_error("forward before reset: call reset(batch) first");
  if (batch != st.batch)
    throw std::invalid_argument("forward: batch " + std::to_string(batch) + " differs from the batch " +
                                std::to_string(st.batch) + " given to reset()");
  if (tokens.empty() || int64_t(tokens.size()) % batch != 0)
    throw std::invalid_argument("forward: " + std::to_string(tokens.size()) + " tokens do not form a (" +
                                std::to_string(batch) + ", T) batch with T >= 1");
  const int64_t t_new = int64_t(tokens.size()) / batch, C = st.width, M = batch * t_new, V = st.vocab;
  if (st.cached + t_new > st.max_tokens)
    throw std::invalid_argument("forward: " + std::to_string(st.cached) + " cached + " + std::to_string(t_new) +
                                " new tokens pass the model's context of " + std::to_string(st.max_tokens) +
                                " tokens; shorten the prompt or generate fewer tokens");
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= V)
      throw std::invalid_argument("forward: token " + std::to_string(tokens[i]) + " at index " + std::to_string(i) +
                                  " is outside the vocabulary 0.." + std::to_string(V - 1));
  // Embedding: token + learned position.
  std::vector<float> x(size_t(M * C));  // (M, C) the replicated residual stream
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < t_new; ++t) {
      const float* e = st.token_embedding.data() + int64_t(tokens[size_t(b * t_new + t)]) * C;
      const float* p = st.position_embedding.data() + (st.cached + t) * C;
      float* out = x.data() + (b * t_new + t) * C;
      for (int64_t c = 0; c < C; ++c) out[c] = e[c] + p[c];
    }
  for (size_t bi = 0; bi < st.blocks.size(); ++bi) {
    if (st.observer) st.observer(int64_t(bi), x.data(), M);
    st.run_block(bi, x, t_new);
  }
  std::vector<float> ln(size_t(M * C));  // (M, C)
  tp_layernorm(x.data(), st.lnf_gain.data(), st.lnf_bias.data(), M, C, ln.data());
  std::vector<float> logits(size_t(M * V));  // (B, T_new, V)
  tp_gemm_xwt(ln.data(), st.head_weight.data(), M, V, C, logits.data());
  for (int64_t m = 0; m < M; ++m)
    for (int64_t v = 0; v < V; ++v) logits[size_t(m * V + v)] += st.head_bias[size_t(v)];
  st.cached += t_new;
  st.times.total_seconds = now_seconds() - t0;
  return logits;
}

TpTransformer tp_simulation(const TransformerWeights& weights, const TpLayout& layout) {
  std::vector<int> all;
  for (int r = 0; r < layout.ranks; ++r) all.push_back(r);
  return TpTransformer(weights, layout, all, tp_reducer_in_process());
}

TpTransformer tp_rank(const TransformerWeights& weights, const TpLayout& layout, Collectives& coll) {
  if (coll.world_size() != layout.ranks)
    throw std::invalid_argument("tp_rank: the job has " + std::to_string(coll.world_size()) +
                                " ranks but the TP layout is for " + std::to_string(layout.ranks) +
                                ": set --tp to WORLD_SIZE");
  return TpTransformer(weights, layout, {coll.rank()}, tp_reducer_collective(coll));
}

}  // namespace qsync
