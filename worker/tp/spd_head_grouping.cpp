// File: worker/tp/spd_head_grouping.cpp
// Head grouping (the SPD paper's HG) for one block:
//  1. Descriptor of head h: its attention map softmax(Q K^T / sqrt(hs)) (causal mask) on every
//     calibration sequence, all maps flattened into one vector. Distances are Euclidean.
//  2. Scatter: split the H heads into N groups of H/N, maximising the summed pairwise distance
//     inside the groups (each rank gets functionally diverse heads). Exhaustive over the
//     H! / ((H/N)!^N N!) unordered splits when there are at most EXHAUSTIVE_SPLITS of them (H=4 N=2:
//     3; H=8 N=2: 35; H=8 N=4: 105; H=16 N=2: 6435); otherwise local search from the contiguous
//     split: apply the best improving swap of two heads in different groups until none improves.
//  3. Match: score[g][s] = sum over calibration tokens of |MLP_s(LN2(X + Y_g + b_O))|_2, the norm
//     of MLP slice s's output before the residual when fed head group g's SPD input; choose the
//     group -> slice assignment maximising the summed score: every permutation for N <= 8, else
//     pairwise swaps from the identity until none improves.
// Rank r gets group r (groups ordered by their smallest head) and slice mlp_slice_of_rank[r].
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>

#include "worker/tp/spd_recovery.h"
#include "worker/tp/spd_student_block.h"

namespace qsync {

namespace {

constexpr double EXHAUSTIVE_SPLITS = 200000;
constexpr int64_t CHUNK_SEQUENCES = 8;  // calibration sequences per engine call

using Groups = std::vector<std::vector<int>>;

Tensor sequences_tensor(const BlockInputs& in, int64_t first, int64_t n) {
  Tensor t = Tensor::empty({n, in.tokens, in.width}, Precision::FP32, nullptr, "head grouping inputs");
  std::memcpy(t.f32(), in.x.data() + first * in.tokens * in.width, size_t(t.numel()) * sizeof(float));
  return t;
}

// dist[h][h'] = Euclidean distance between the heads' attention maps over all sequences.
std::vector<std::vector<double>> attention_map_distances(const BlockWeights& b, const BlockShape& shape,
                                                         const BlockInputs& in) {
  const int64_t H = shape.heads, C = shape.width, hs = shape.head_size(), T = in.tokens;
  std::vector<int> all(static_cast<size_t>(H));
  std::iota(all.begin(), all.end(), 0);
  auto ln1 = layernorm_from("ln1", b.ln1_gain, b.ln1_bias, nullptr);
  auto attn = attention_shard(b, shape, all, "attn", nullptr);
  StepContext ctx;
  ctx.training = false;
  std::vector<std::vector<double>> sq(size_t(H), std::vector<double>(size_t(H), 0.0));
  std::vector<float> maps(size_t(H * T * T));  // (H, T, T) of one sequence
  const float scale = 1.0f / std::sqrt(float(hs));
  for (int64_t first = 0; first < in.sequences; first += CHUNK_SEQUENCES) {
    const int64_t n = std::min(CHUNK_SEQUENCES, in.sequences - first);
    const Tensor a = ln1->forward(sequences_tensor(in, first, n).reshape({n * T, C}), ctx);
    const Tensor qkv = attn->qkv().forward(a, ctx);  // (n*T, 3C)
    for (int64_t s = 0; s < n; ++s) {
      const float* base = qkv.f32() + s * T * 3 * C;
      for (int64_t h = 0; h < H; ++h)
        for (int64_t t = 0; t < T; ++t) {
          float* row = maps.data() + (h * T + t) * T;  // (T)
          const float* q = base + t * 3 * C + h * hs;
          const int64_t visible = shape.causal ? t + 1 : T;
          float maxv = -std::numeric_limits<float>::infinity();
          for (int64_t t2 = 0; t2 < visible; ++t2) {
            const float* k = base + t2 * 3 * C + C + h * hs;
            float dot = 0.0f;
            for (int64_t i = 0; i < hs; ++i) dot += q[i] * k[i];
            row[t2] = dot * scale;
            maxv = std::max(maxv, row[t2]);
          }
          float sum = 0.0f;
          for (int64_t t2 = 0; t2 < visible; ++t2) sum += (row[t2] = std::exp(row[t2] - maxv));
          for (int64_t t2 = 0; t2 < T; ++t2) row[t2] = t2 < visible ? row[t2] / sum : 0.0f;
        }
      for (int64_t h = 0; h < H; ++h)
        for (int64_t h2 = h + 1; h2 < H; ++h2) {
          const float* p = maps.data() + h * T * T;
          const float* q = maps.data() + h2 * T * T;
          double d = 0.0;
          for (int64_t i = 0; i < T * T; ++i) d += double(p[i] - q[i]) * double(p[i] - q[i]);
          sq[size_t(h)][size_t(h2)] += d;
        }
    }
  }
  for (int64_t h = 0; h < H; ++h)
    for (int64_t h2 = h + 1; h2 < H; ++h2)
      sq[size_t(h2)][size_t(h)] = sq[size_t(h)][size_t(h2)] = std::sqrt(sq[size_t(h)][size_t(h2)]);
  return sq;
}

double within_distance(const Groups& groups, const std::vector<std::vector<double>>& dist) {
  double total = 0.0;
  for (const auto& g : groups)
    for (size_t i = 0; i < g.size(); ++i)
      for (size_t j = i + 1; j < g.size(); ++j) total += dist[size_t(g[i])][size_t(g[j])];
  return total;
}

// H! / ((H/N)!^N N!), in double.
double unordered_split_count(int H, int N) {
  double lg = std::lgamma(H + 1.0) - N * std::lgamma(H / N + 1.0) - std::lgamma(N + 1.0);
  return std::exp(lg);
}

// Every unordered split: head h joins a group with room; a new group only opens as the first
// empty one, so each split is seen once.
void search_all(int h, int H, int size, Groups& groups, const std::vector<std::vector<double>>& dist, double& best,
                Groups& best_groups) {
  if (h == H) {
    const double d = within_distance(groups, dist);
    if (d > best + 1e-12) {
      best = d;
      best_groups = groups;
    }
    return;
  }
  for (auto& g : groups) {
    if (int(g.size()) >= size) continue;
    const bool opening = g.empty();
    g.push_back(h);
    search_all(h + 1, H, size, groups, dist, best, best_groups);
    g.pop_back();
    if (opening) break;
  }
}

Groups swap_search(Groups groups, const std::vector<std::vector<double>>& dist) {
  for (;;) {
    double best_gain = 1e-12;
    size_t bp = 0, bi = 0, bq = 0, bj = 0;
    for (size_t p = 0; p < groups.size(); ++p)
      for (size_t q = p + 1; q < groups.size(); ++q)
        for (size_t i = 0; i < groups[p].size(); ++i)
          for (size_t j = 0; j < groups[q].size(); ++j) {
            Groups trial = groups;
            std::swap(trial[p][i], trial[q][j]);
            const double gain = within_distance(trial, dist) - within_distance(groups, dist);
            if (gain > best_gain) {
              best_gain = gain;
              bp = p, bi = i, bq = q, bj = j;
            }
          }
    if (best_gain <= 1e-12) return groups;
    std::swap(groups[bp][bi], groups[bq][bj]);
  }
}

// score[g][s]: summed token norm of MLP slice s's output fed with group g's SPD input.
std::vector<std::vector<double>> mlp_output_norms(const BlockWeights& b, const BlockShape& shape, const Groups& groups,
                                                  const BlockInputs& in) {
  const int N = int(groups.size());
  const int64_t C = shape.width, T = in.tokens;
  auto ln1 = layernorm_from("ln1", b.ln1_gain, b.ln1_bias, nullptr);
  auto ln2 = layernorm_from("ln2", b.ln2_gain, b.ln2_bias, nullptr);
  std::vector<std::unique_ptr<AttentionLayer>> attn;
  std::vector<std::unique_ptr<MlpShard>> mlp;
  for (int r = 0; r < N; ++r) {
    attn.push_back(attention_shard(b, shape, groups[size_t(r)], "group" + std::to_string(r), nullptr));
    mlp.push_back(std::make_unique<MlpShard>(b, shape, r, N, "slice" + std::to_string(r), nullptr));
  }
  StepContext ctx;
  ctx.training = false;
  std::vector<std::vector<double>> score(size_t(N), std::vector<double>(size_t(N), 0.0));
  for (int64_t first = 0; first < in.sequences; first += CHUNK_SEQUENCES) {
    const int64_t n = std::min(CHUNK_SEQUENCES, in.sequences - first), M = n * T;
    const Tensor x = sequences_tensor(in, first, n);  // (n, T, C)
    const Tensor a = ln1->forward(x.reshape({M, C}), ctx);
    for (int g = 0; g < N; ++g) {
      const Tensor y = attn[size_t(g)]->forward(a.reshape({n, T, C}), ctx);  // (n, T, C)
      Tensor h = Tensor::empty({M, C}, Precision::FP32, nullptr, "X + Y_g + b_O");
      for (int64_t i = 0; i < M; ++i)
        for (int64_t c = 0; c < C; ++c)
          h.f32()[i * C + c] = x.f32()[i * C + c] + y.f32()[i * C + c] + b.proj_bias[size_t(c)];
      const Tensor u = ln2->forward(h, ctx);
      for (int s = 0; s < N; ++s) {
        const Tensor z = mlp[size_t(s)]->forward(u, ctx);  // (M, C)
        for (int64_t i = 0; i < M; ++i) {
          double norm = 0.0;
          for (int64_t c = 0; c < C; ++c) norm += double(z.f32()[i * C + c]) * double(z.f32()[i * C + c]);
          score[size_t(g)][size_t(s)] += std::sqrt(norm);
        }
      }
    }
  }
  return score;
}

double assignment_score(const std::vector<int>& perm, const std::vector<std::vector<double>>& score) {
  double total = 0.0;
  for (size_t g = 0; g < perm.size(); ++g) total += score[g][size_t(perm[g])];
  return total;
}

std::vector<int> best_assignment(const std::vector<std::vector<double>>& score) {
  const int N = int(score.size());
  std::vector<int> perm(static_cast<size_t>(N));
  std::iota(perm.begin(), perm.end(), 0);
  std::vector<int> best = perm;
  if (N <= 8) {
    double best_score = assignment_score(perm, score);
    while (std::next_permutation(perm.begin(), perm.end())) {
      const double s = assignment_score(perm, score);
      if (s > best_score + 1e-12) best_score = s, best = perm;
    }
    return best;
  }
  for (bool improved = true; improved;) {
    improved = false;
    for (int i = 0; i < N; ++i)
      for (int j = i + 1; j < N; ++j) {
        std::vector<int> trial = best;
        std::swap(trial[size_t(i)], trial[size_t(j)]);
        if (assignment_score(trial, score) > assignment_score(best, score) + 1e-12) best = trial, improved = true;
      }
  }
  return best;
}

}  // namespace

HeadGrouping spd_head_grouping(const TransformerWeights& w, int64_t block, int ranks, const BlockInputs& inputs) {
  const BlockShape shape = spd_recovery_block_shape(w, block, inputs);
  const int H = int(shape.heads);
  if (ranks < 1 || H % ranks != 0 || shape.mlp_width % ranks != 0)
    throw std::invalid_argument("head grouping: " + std::to_string(ranks) + " ranks do not divide block " +
                                std::to_string(block) + "'s " + std::to_string(H) + " heads and MLP width " +
                                std::to_string(shape.mlp_width) + "; use a TP degree that divides both");
  const BlockWeights& b = w.blocks[size_t(block)];
  const int size = H / ranks;
  const std::vector<std::vector<double>> dist = attention_map_distances(b, shape, inputs);

  Groups contiguous(static_cast<size_t>(ranks));
  for (int h = 0; h < H; ++h) contiguous[size_t(h / size)].push_back(h);
  Groups groups;
  if (unordered_split_count(H, ranks) <= EXHAUSTIVE_SPLITS) {
    Groups work(static_cast<size_t>(ranks));
    double best = -1.0;
    search_all(0, H, size, work, dist, best, groups);
  } else {
    groups = swap_search(contiguous, dist);
  }
  for (auto& g : groups) std::sort(g.begin(), g.end());
  std::sort(groups.begin(), groups.end());

  HeadGrouping result;
  result.heads_of_rank = groups;
  result.within_rank_distance = within_distance(groups, dist);
  result.contiguous_distance = within_distance(contiguous, dist);
  const std::vector<std::vector<double>> score = mlp_output_norms(b, shape, groups, inputs);
  result.mlp_slice_of_rank = best_assignment(score);
  result.mlp_output_norm = assignment_score(result.mlp_slice_of_rank, score);
  std::vector<int> identity(static_cast<size_t>(ranks));
  std::iota(identity.begin(), identity.end(), 0);
  result.identity_mlp_output_norm = assignment_score(identity, score);
  return result;
}

TpLayout tp_layout_with_grouping(const TpLayout& layout, int64_t block, const HeadGrouping& grouping) {
  if (block < 0 || block >= int64_t(layout.heads_of_rank.size()) ||
      block >= int64_t(layout.mlp_slice_of_rank.size()))
    throw std::invalid_argument("tp_layout_with_grouping: block " + std::to_string(block) +
                                " is not in the layout's " + std::to_string(layout.heads_of_rank.size()) + " blocks");
  if (int(grouping.heads_of_rank.size()) != layout.ranks || int(grouping.mlp_slice_of_rank.size()) != layout.ranks)
    throw std::invalid_argument("tp_layout_with_grouping: the grouping is for " +
                                std::to_string(grouping.heads_of_rank.size()) + " ranks, the layout has " +
                                std::to_string(layout.ranks));
  TpLayout out = layout;
  out.heads_of_rank[size_t(block)] = grouping.heads_of_rank;
  out.mlp_slice_of_rank[size_t(block)] = grouping.mlp_slice_of_rank;
  return out;
}

}  // namespace qsync
