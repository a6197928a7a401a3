// File: worker/tp/tp_block.h
// One tensor-parallel rank's shard of one transformer block, and the arithmetic that runs on it:
// the attention partial sum Y_i (local heads, with this rank's KV cache, times the W_O row shard)
// and the MLP partial sum Z_i (fc1 column shard + its bias slice, exact GELU, fc2 row shard).
// Replicated pieces (layernorms, the row-parallel biases) are applied by the caller
// (tp_transformer.cpp), which also owns the sums over ranks. The arithmetic follows the training
// engine's layers (worker/layers/{layernorm,attention,activation,linear}.cpp) operation by
// operation; projections run through the FP32 host GEMM backend as Linear's do.
#pragma once

#include <cstdint>
#include <vector>

#include "worker/tp/transformer_weights.h"

namespace qsync {

struct TpBlockShard {
  int64_t width = 0;        // C
  int64_t head_size = 0;    // hs = C / H
  int64_t local_heads = 0;  // Hl = H / N
  int64_t mlp_local = 0;    // Fl = F / N
  std::vector<float> qkv_weight;   // (3 Cl, C), Cl = Hl * hs: rows [Q of local heads | K | V], heads in layout order
  std::vector<float> qkv_bias;     // (3 Cl)
  std::vector<float> proj_weight;  // (C, Cl): the W_O columns of the local heads
  std::vector<float> fc1_weight;   // (Fl, C): rows slice*Fl .. of fc1
  std::vector<float> fc1_bias;     // (Fl)
  std::vector<float> fc2_weight;   // (C, Fl): the matching columns of fc2
  std::vector<float> k_cache, v_cache;  // (B, Hl, T_max, hs) each
};

// Cuts rank `heads` / MLP `slice` (of `ranks` slices) out of block `b`.
TpBlockShard tp_block_shard(const BlockWeights& b, int64_t mlp_width, const std::vector<int>& heads, int slice,
                            int ranks);

// Sizes the shard's KV cache for `batch` sequences of up to `max_tokens` tokens (zero-filled).
void tp_block_shard_reset(TpBlockShard& s, int64_t batch, int64_t max_tokens);

// y (M, C) = Attn_i(x): x (M, C) is LN1 of the block input, M = batch * t_new rows at positions
// pos0 .. pos0 + t_new - 1 of each sequence. Appends the new keys and values to the cache, attends
// causally over positions 0..p, multiplies by the W_O shard (no bias).
void tp_attention_partial(TpBlockShard& s, const float* x, int64_t batch, int64_t t_new, int64_t pos0,
                          int64_t max_tokens, float* y);

// z (M, C) = fc2_i(GELU(fc1_i(x) + b1_i)): x (M, C) is LN2 of the MLP input; no fc2 bias.
void tp_mlp_partial(const TpBlockShard& s, const float* x, int64_t rows, float* z);

// y (rows, C) = LayerNorm(x) with gain g and bias b (worker/layers/layernorm.h: the training engine's arithmetic).
void tp_layernorm(const float* x, const float* g, const float* b, int64_t rows, int64_t C, float* y);

// y (M, N) = x (M, K) W^T (+ bias (N) on every row), W (N, K), FP32 on the host GEMM backend (beta 0).
void tp_gemm_xwt(const float* x, const float* w, int64_t M, int64_t N, int64_t K, float* y,
                 const float* bias = nullptr);

}  // namespace qsync
