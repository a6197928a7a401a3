// File: worker/tp/transformer_weights.h
// The weights of a trained causal transformer in the zoo's char-GPT family (embedding with learned
// positions, transformer_blocks, final layernorm, linear head), as plain FP32 arrays laid out as
// the training engine keeps them, and the Megatron layout that assigns each block's heads and MLP
// slices to tensor-parallel ranks. Inference (worker/tp/tp_transformer.h), SPD planning and
// distillation read these; they never touch the training engine's layers.
//
//   TransformerWeights w = transformer_weights_load("char-gpt", "ckpt/latest.qckpt");
//   TpLayout layout = tp_layout_contiguous(w, /*ranks=*/2);   // throws if 2 does not divide H or F
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace qsync {

class Model;

// One transformer block. C = width, H = heads, hs = C / H, F = MLP width (mlp_ratio * C).
struct BlockWeights {
  int64_t heads = 0;                         // H
  std::vector<float> ln1_gain, ln1_bias;     // (C), (C)
  std::vector<float> qkv_weight, qkv_bias;   // (3C, C), (3C): rows [Q | K | V], head h = rows h*hs..h*hs+hs-1 of each
  std::vector<float> proj_weight, proj_bias; // (C, C), (C): W_O; column block h*hs.. belongs to head h
  std::vector<float> ln2_gain, ln2_bias;     // (C), (C)
  std::vector<float> fc1_weight, fc1_bias;   // (F, C), (F)
  std::vector<float> fc2_weight, fc2_bias;   // (C, F), (C)
};

struct TransformerWeights {
  std::string model_name;   // the model description's name ("char-gpt")
  uint64_t model_hash = 0;  // ModelDesc::hash of the model the checkpoint was trained as
  int64_t vocab = 0;        // V
  int64_t max_tokens = 0;   // T_max: the learned positions (the model's seq_len)
  int64_t width = 0;        // C
  int64_t mlp_width = 0;    // F
  bool causal = true;
  std::vector<float> token_embedding;     // (V, C)
  std::vector<float> position_embedding;  // (T_max, C)
  std::vector<BlockWeights> blocks;       // L blocks
  std::vector<float> lnf_gain, lnf_bias;  // (C)
  std::vector<float> head_weight, head_bias;  // (V, C), (V)
};

// LayerNorm epsilon of the training engine (worker/layers/layernorm.cpp).
inline constexpr float TRANSFORMER_LN_EPS = 1e-5f;

// From a live model (its FP32 master weights). Throws std::invalid_argument naming the layer when
// the model is not embedding + transformer_blocks + layernorm + linear head.
TransformerWeights transformer_weights_from_model(const Model& model);
// From a model (file or zoo name) and a `qsync-worker train` checkpoint file (or its directory).
// Throws naming the path when the checkpoint is missing, and the checkpoint's error when it belongs
// to another model.
TransformerWeights transformer_weights_load(const std::string& model, const std::string& checkpoint);

// Distilled weights are kept in a weights file of their own (atomic write, versioned header, model
// hash, checksum), so the training checkpoint is never modified.
void transformer_weights_save(const TransformerWeights& w, const std::string& path);
TransformerWeights transformer_weights_read(const std::string& path);

// Which heads and which MLP slice each rank owns, per block. Exact TP gives the same result for
// every layout (up to float summation order); SPD's approximation depends on it (head grouping).
struct TpLayout {
  int ranks = 1;
  // [block][rank] -> the global head ids rank r owns (H / ranks each, any order).
  std::vector<std::vector<std::vector<int>>> heads_of_rank;
  // [block][rank] -> which contiguous slice s of the MLP hidden units (rows s*F/N.. of fc1) rank r owns.
  std::vector<std::vector<int>> mlp_slice_of_rank;
};

// Rank r owns heads r*H/N .. and MLP slice r. Throws std::invalid_argument naming the block, the
// head count / MLP width and the ranks when `ranks` does not divide them (or is < 1).
TpLayout tp_layout_contiguous(const TransformerWeights& w, int ranks);
// Throws std::invalid_argument when a layout does not match the weights (block count, a head
// missing or owned twice, uneven split, slices not a permutation).
void tp_layout_check(const TransformerWeights& w, const TpLayout& layout);

}  // namespace qsync
