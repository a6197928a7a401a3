// File: tests/worker/tp/tp_transformer_test.cpp
// The TP engine's in-process simulation against the training engine's Model forward (N = 1, 2, 4,
// any head/slice layout), token-by-token decode against prefill, SPD on no block against TP
// (bitwise), SPD on one block against a hand-written double-precision reference of the SPD
// formula, the block input observer, the all-reduce count, tp_evaluate, and bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "tests/worker/tp/tiny_gpt.h"
#include "worker/tp/tp_transformer.h"

namespace qsync {
namespace {

using test::max_abs_diff;
using test::random_tokens;
using test::TinyGpt;

constexpr int64_t T = 16;  // the tiny model's context

// TP splits each projection's K-sum over ranks and adds the partial sums: FP32 summation order
// changes, nothing else. Logits are O(1); observed differences are ~1e-6, the bound leaves 100x.
constexpr float LOGITS_TOLERANCE = 1e-4f;

TEST(TpTransformer, AllSyncsMatchTheTrainingEngine) {
  TinyGpt g;
  const TransformerWeights w = transformer_weights_from_model(*g.model);
  const std::vector<int32_t> tokens = random_tokens(2 * T, 1);  // (2, T)
  const std::vector<float> expected = g.logits(tokens, 2);
  for (int n : {1, 2, 4}) {
    TpTransformer sim = tp_simulation(w, tp_layout_contiguous(w, n));
    EXPECT_EQ(sim.tp_degree(), n);
    sim.reset(2);
    const std::vector<float> got = sim.forward(tokens, 2);
    ASSERT_EQ(got.size(), expected.size());
    EXPECT_LT(max_abs_diff(got, expected), LOGITS_TOLERANCE) << "N = " << n;
    EXPECT_EQ(sim.last_times().allreduces, 2 * sim.blocks()) << "two syncs per block";
    EXPECT_EQ(sim.cached_tokens(), T);
  }
}

TEST(TpTransformer, ExactTpDoesNotDependOnTheLayout) {
  TinyGpt g(21);
  const TransformerWeights w = transformer_weights_from_model(*g.model);
  TpLayout layout = tp_layout_contiguous(w, 2);
  layout.heads_of_rank[0] = {{1, 3}, {0, 2}};
  layout.heads_of_rank[1] = {{2, 0}, {3, 1}};
  layout.mlp_slice_of_rank[1] = {1, 0};
  const std::vector<int32_t> tokens = random_tokens(T, 2);
  TpTransformer sim = tp_simulation(w, layout);
  sim.reset(1);
  EXPECT_LT(max_abs_diff(sim.forward(tokens, 1), g.logits(tokens, 1)), LOGITS_TOLERANCE);
}

// Prefill of all tokens vs. a short prefill and then one token at a time.
void expect_decode_matches_prefill(const std::vector<bool>& dropped) {
  TinyGpt g(5);
  const TransformerWeights w = transformer_weights_from_model(*g.model);
  TpTransformer sim = tp_simulation(w, tp_layout_contiguous(w, 2));
  sim.set_dropped(dropped);
  const std::vector<int32_t> tokens = random_tokens(2 * T, 9);  // (2, T)
  sim.reset(2);
  const std::vector<float> full = sim.forward(tokens, 2);  // (2, T, V)
  const int64_t V = sim.vocab(), first = 5;
  sim.reset(2);
  std::vector<int32_t> head;
  for (int64_t b = 0; b < 2; ++b) head.insert(head.end(), tokens.begin() + b * T, tokens.begin() + b * T + first);
  const std::vector<float> pre = sim.forward(head, 2);  // (2, first, V)
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t t = 0; t < first; ++t)
      for (int64_t v = 0; v < V; ++v)
        ASSERT_NEAR(pre[size_t((b * first + t) * V + v)], full[size_t((b * T + t) * V + v)], 1e-5);
  for (int64_t t = first; t < T; ++t) {
    const std::vector<float> step = sim.forward({tokens[size_t(t)], tokens[size_t(T + t)]}, 2);  // (2, 1, V)
    EXPECT_EQ(sim.cached_tokens(), t + 1);
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t v = 0; v < V; ++v)
        ASSERT_NEAR(step[size_t(b * V + v)], full[size_t((b * T + t) * V + v)], 1e-5) << "position " << t;
  }
}

TEST(TpTransformer, DecodeEqualsPrefill) { expect_decode_matches_prefill({false, false}); }
TEST(TpTransformer, DecodeEqualsPrefillWithSpd) { expect_decode_matches_prefill({false, true}); }

TEST(TpTransformer, SpdOnNoBlockIsTpBitwise) {
  TinyGpt g(8);
  const TransformerWeights w = transformer_weights_from_model(*g.model);
  const std::vector<int32_t> tokens = random_tokens(T, 4);
  TpTransformer tp = tp_simulation(w, tp_layout_contiguous(w, 4));
  tp.reset(1);
  const std::vector<float> reference = tp.forward(tokens, 1);
  TpTransformer spd = tp_simulation(w, tp_layout_contiguous(w, 4));
  spd.set_dropped({true, true});
  spd.reset(1);
  const std::vector<float> all_dropped = spd.forward(tokens, 1);
  EXPECT_EQ(spd.last_times().allreduces, spd.blocks()) << "one sync per SPD block";
  EXPECT_GT(max_abs_diff(all_dropped, reference), 1e-3f) << "SPD on every block changed nothing";
  spd.set_dropped({false, false});
  spd.reset(1);
  const std::vector<float> none_dropped = spd.forward(tokens, 1);
  ASSERT_EQ(none_dropped.size(), reference.size());
  EXPECT_EQ(std::memcmp(none_dropped.data(), reference.data(), reference.size() * sizeof(float)), 0);
}

// ---- a hand-written reference of the SPD formula, in double, straight from the full weights ----

using Vec = std::vector<double>;

Vec layernorm(const Vec& x, const std::vector<float>& g, const std::vector<float>& b, int64_t C) {
  Vec y(x.size());
  for (size_t r = 0; r < x.size() / size_t(C); ++r) {
    double mean = 0, var = 0;
    for (int64_t c = 0; c < C; ++c) mean += x[r * C + c];
    mean /= double(C);
    for (int64_t c = 0; c < C; ++c) var += (x[r * C + c] - mean) * (x[r * C + c] - mean);
    var /= double(C);
    for (int64_t c = 0; c < C; ++c)
      y[r * C + c] = (x[r * C + c] - mean) / std::sqrt(var + TRANSFORMER_LN_EPS) * g[size_t(c)] + b[size_t(c)];
  }
  return y;
}

// Rank-local attention partial Y_i (T, C) of `heads`: softmax(q k^T / sqrt(hs)) v, then the W_O
// columns of those heads, no bias.
Vec attention_partial(const Vec& x, const BlockWeights& bw, const std::vector<int>& heads, int64_t C) {
  const int64_t hs = C / bw.heads;
  auto proj = [&](int64_t row, int64_t t) {  // (qkv row `row`) . x[t] + bias
    double s = bw.qkv_bias[size_t(row)];
    for (int64_t c = 0; c < C; ++c) s += double(bw.qkv_weight[size_t(row * C + c)]) * x[size_t(t * C + c)];
    return s;
  };
  Vec y(size_t(T * C), 0.0);
  for (int h : heads) {
    for (int64_t t = 0; t < T; ++t) {
      Vec scores(size_t(t + 1));
      double maxv = -1e300;
      for (int64_t t2 = 0; t2 <= t; ++t2) {
        double dot = 0;
        for (int64_t i = 0; i < hs; ++i) dot += proj(h * hs + i, t) * proj(C + h * hs + i, t2);
        scores[size_t(t2)] = dot / std::sqrt(double(hs));
        maxv = std::max(maxv, scores[size_t(t2)]);
      }
      double sum = 0;
      for (double& s : scores) sum += (s = std::exp(s - maxv));
      Vec out(size_t(hs), 0.0);
      for (int64_t t2 = 0; t2 <= t; ++t2)
        for (int64_t i = 0; i < hs; ++i) out[size_t(i)] += scores[size_t(t2)] / sum * proj(2 * C + h * hs + i, t2);
      for (int64_t c = 0; c < C; ++c)
        for (int64_t i = 0; i < hs; ++i)
          y[size_t(t * C + c)] += double(bw.proj_weight[size_t(c * C + h * hs + i)]) * out[size_t(i)];
    }
  }
  return y;
}

// MLP partial Z_i (T, C) of hidden units [f0, f0 + Fl): fc2 columns times GELU(fc1 rows + bias).
Vec mlp_partial(const Vec& x, const BlockWeights& bw, int64_t f0, int64_t Fl, int64_t C, int64_t F) {
  Vec z(x.size(), 0.0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t f = f0; f < f0 + Fl; ++f) {
      double a = bw.fc1_bias[size_t(f)];
      for (int64_t c = 0; c < C; ++c) a += double(bw.fc1_weight[size_t(f * C + c)]) * x[size_t(t * C + c)];
      const double gelu = 0.5 * a * (1.0 + std::erf(a / std::sqrt(2.0)));
      for (int64_t c = 0; c < C; ++c) z[size_t(t * C + c)] += double(bw.fc2_weight[size_t(c * F + f)]) * gelu;
    }
  return z;
}

// The model with block `spd_block` as an SPD block over `ranks` contiguous ranks, every other
// block exact: logits (T, V) of one sequence.
std::vector<float> spd_reference(const TransformerWeights& w, const std::vector<int32_t>& tokens, int64_t spd_block,
                                 int ranks) {
  const int64_t C = w.width, F = w.mlp_width, V = w.vocab;
  Vec x(size_t(T * C));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c = 0; c < C; ++c)
      x[size_t(t * C + c)] = double(w.token_embedding[size_t(tokens[size_t(t)] * C + c)]) +
                             double(w.position_embedding[size_t(t * C + c)]);
  for (size_t b = 0; b < w.blocks.size(); ++b) {
    const BlockWeights& bw = w.blocks[b];
    const Vec ln1 = layernorm(x, bw.ln1_gain, bw.ln1_bias, C);
    const int64_t per = bw.heads / ranks;
    std::vector<Vec> y;
    for (int r = 0; r < ranks; ++r) {
      std::vector<int> heads;
      for (int64_t h = r * per; h < (r + 1) * per; ++h) heads.push_back(int(h));
      y.push_back(attention_partial(ln1, bw, heads, C));
    }
    Vec out = x;
    if (int64_t(b) != spd_block) {  // H = X + sum Y + b_O;  out = H + sum Z + b_fc2
      Vec h = x;
      for (size_t i = 0; i < h.size(); ++i) {
        for (int r = 0; r < ranks; ++r) h[i] += y[size_t(r)][i];
        h[i] += bw.proj_bias[i % size_t(C)];
      }
      const Vec ln2 = layernorm(h, bw.ln2_gain, bw.ln2_bias, C);
      out = h;
      for (int r = 0; r < ranks; ++r) {
        const Vec z = mlp_partial(ln2, bw, r * F / ranks, F / ranks, C, F);
        for (size_t i = 0; i < out.size(); ++i) out[i] += z[i];
      }
      for (size_t i = 0; i < out.size(); ++i) out[i] += bw.fc2_bias[i % size_t(C)];
    } else {  // H_i = X + Y_i + b_O;  out = X + sum_i (Y_i + Z_i) + b_O + b_fc2
      for (int r = 0; r < ranks; ++r) {
        Vec h = x;
        for (size_t i = 0; i < h.size(); ++i) h[i] += y[size_t(r)][i] + bw.proj_bias[i % size_t(C)];
        const Vec z = mlp_partial(layernorm(h, bw.ln2_gain, bw.ln2_bias, C), bw, r * F / ranks, F / ranks, C, F);
        for (size_t i = 0; i < out.size(); ++i) out[i] += y[size_t(r)][i] + z[i];
      }
      for (size_t i = 0; i < out.size(); ++i) out[i] += bw.proj_bias[i % size_t(C)] + bw.fc2_bias[i % size_t(C)];
    }
    x = out;
  }
  const Vec lnf = layernorm(x, w.lnf_gain, w.lnf_bias, C);
  std::vector<float> logits(size_t(T * V));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t v = 0; v < V; ++v) {
      double s = w.head_bias[size_t(v)];
      for (int64_t c = 0; c < C; ++c) s += double(w.head_weight[size_t(v * C + c)]) * lnf[size_t(t * C + c)];
      logits[size_t(t * V + v)] = float(s);
    }
  return logits;
}

TEST(TpTransformer, SpdBlockFollowsTheFormula) {
  TinyGpt g(13);
  const TransformerWeights w = transformer_weights_from_model(*g.model);
  const std::vector<int32_t> tokens = random_tokens(T, 6);
  for (int ranks : {2, 4}) {
    TpTransformer sim = tp_simulation(w, tp_layout_contiguous(w, ranks));
    sim.reset(1);
    const std::vector<float> tp = sim.forward(tokens, 1);
    EXPECT_LT(max_abs_diff(tp, spd_reference(w, tokens, /*spd_block=*/-1, ranks)), LOGITS_TOLERANCE);
    for (int64_t block : {0, 1}) {
      std::vector<bool> dropped(2, false);
      dropped[size_t(block)] = true;
      sim.set_dropped(dropped);
      sim.reset(1);
      const std::vector<float> spd = sim.forward(tokens, 1);
      EXPECT_EQ(sim.last_times().allreduces, 3);
      // FP32 engine vs double reference: the same tolerance as TP vs the training engine.
      EXPECT_LT(max_abs_diff(spd, spd_reference(w, tokens, block, ranks)), LOGITS_TOLERANCE)
          << "block " << block << ", " << ranks << " ranks";
      // ... and the approximation is visible: SPD is not TP.
      EXPECT_GT(max_abs_diff(spd, tp), 100 * LOGITS_TOLERANCE) << "block " << block << ", " << ranks << " ranks";
    }
  }
}

TEST(TpTransformer, ObserverSeesEveryBlockInput) {
  TinyGpt g(3);
  const TransformerWeights w = transformer_weights_from_model(*g.model);
  TpTransformer sim = tp_simulation(w, tp_layout_contiguous(w, 2));
  std::vector<std::vector<float>> inputs;
  sim.set_block_input_observer([&](int64_t block, const float* x, int64_t rows) {
    EXPECT_EQ(block, int64_t(inputs.size()));
    inputs.emplace_back(x, x + rows * w.width);
  });
  const std::vector<int32_t> tokens = random_tokens(4, 2);
  sim.reset(1);
  sim.forward(tokens, 1);
  ASSERT_EQ(inputs.size(), 2u);
  for (int64_t t = 0; t < 4; ++t)
    for (int64_t c = 0; c < w.width; ++c)
      ASSERT_EQ(inputs[0][size_t(t * w.width + c)],
                w.token_embedding[size_t(tokens[size_t(t)] * w.width + c)] + w.position_embedding[size_t(t * w.width + c)]);
  EXPECT_GT(max_abs_diff(inputs[0], inputs[1]), 1e-3f) << "block 1 saw block 0's input";
}

TEST(TpTransformer, EvaluateScoresNextTokens) {
  TinyGpt g(17);
  const TransformerWeights w = transformer_weights_from_model(*g.model);
  TpTransformer sim = tp_simulation(w, tp_layout_contiguous(w, 2));
  const std::vector<int32_t> tokens = random_tokens(3 * T + 5, 12);  // 3 windows of T + the last target
  const TpQuality q = tp_evaluate(sim, tokens, T, 0, /*batch=*/2);
  EXPECT_EQ(q.positions, 3 * T);
  double loss = 0;
  int64_t correct = 0;
  for (int64_t win = 0; win < 3; ++win) {
    const std::vector<int32_t> in(tokens.begin() + win * T, tokens.begin() + (win + 1) * T);
    const std::vector<float> logits = g.logits(in, 1);
    for (int64_t t = 0; t < T; ++t) {
      const float* row = logits.data() + t * 96;
      const int32_t target = tokens[size_t(win * T + t + 1)];
      double sum = 0;
      int64_t best = 0;
      for (int64_t v = 0; v < 96; ++v) {
        sum += std::exp(double(row[v]));
        if (row[v] > row[best]) best = v;
      }
      loss += std::log(sum) - row[target];
      correct += best == target;
    }
  }
  EXPECT_NEAR(q.loss, loss / double(3 * T), 1e-4);
  EXPECT_NEAR(q.perplexity, std::exp(loss / double(3 * T)), 1e-3);
  EXPECT_NEAR(q.accuracy, double(correct) / double(3 * T), 1e-9);
  EXPECT_EQ(tp_evaluate(sim, tokens, T, /*max_windows=*/1).positions, T);
  EXPECT_THROW(tp_evaluate(sim, tokens, T + 1), std::invalid_argument);

  // Windows that carry their own last target (stride T + 1): the same as scoring each alone.
  const std::vector<int32_t> chunks = random_tokens(3 * (T + 1) + 2, 13);
  const TpQuality strided = tp_evaluate(sim, chunks, T, 0, /*batch=*/2, /*stride=*/T + 1);
  EXPECT_EQ(strided.positions, 3 * T);
  double chunk_loss = 0, chunk_correct = 0;
  for (int64_t win = 0; win < 3; ++win) {
    const std::vector<int32_t> one(chunks.begin() + win * (T + 1), chunks.begin() + (win + 1) * (T + 1));
    const TpQuality q1 = tp_evaluate(sim, one, T);
    EXPECT_EQ(q1.positions, T);
    chunk_loss += q1.loss;
    chunk_correct += q1.accuracy;
  }
  // Batches of 2 and of 1 window may round the float logits differently: 1e-5 nats, as above.
  EXPECT_NEAR(strided.loss, chunk_loss / 3, 1e-5);
  EXPECT_NEAR(strided.accuracy, chunk_correct / 3, 1e-9);
  EXPECT_THROW(tp_evaluate(sim, chunks, T, 0, 2, /*stride=*/T - 1), std::invalid_argument);  // overlapping
}

TEST(TpTransformer, BadInputIsRefused) {
  TinyGpt g;
  const TransformerWeights w = transformer_weights_from_model(*g.model);
  TpTransformer sim = tp_simulation(w, tp_layout_contiguous(w, 2));
  EXPECT_THROW(sim.forward({1, 2}, 1), std::logic_error);  // before reset
  sim.reset(1);
  EXPECT_THROW(sim.forward({1, 96}, 1), std::invalid_argument);  // outside the vocabulary
  EXPECT_THROW(sim.forward({1, 2}, 2), std::invalid_argument);   // batch differs from reset
  EXPECT_THROW(sim.set_dropped({true}), std::invalid_argument);
  sim.forward(random_tokens(T - 1, 1), 1);
  sim.forward({3}, 1);
  try {
    sim.forward({4}, 1);
    FAIL() << "decoding past the context was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("context of 16 tokens"), std::string::npos) << e.what();
  }
  EXPECT_THROW(TpTransformer(w, tp_layout_contiguous(w, 2), {2}, tp_reducer_in_process()), std::invalid_argument);
  TpLayout broken = tp_layout_contiguous(w, 2);
  broken.heads_of_rank[0][0] = {0, 0};
  EXPECT_THROW(tp_simulation(w, broken), std::invalid_argument);
}

}  // namespace
}  // namespace qsync
