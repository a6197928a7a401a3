// File: worker/tp/spd_block_shards.h
// One tensor-parallel rank's pieces of a transformer block as the training engine's layers, built
// from (and stored back into) the block's unsharded FP32 weights (worker/tp/transformer_weights.h):
//   layernorm        a replicated LN (C), gain and bias copied;
//   attention shard  the rank's heads only: QKV rows of those heads (column-parallel, with their
//                    bias), W_O columns of those heads (row-parallel, no bias: b_O is added once by
//                    the caller); an AttentionLayer whose heads' width is smaller than C;
//   MLP shard        slice s of N of the hidden units: fc1 rows (with bias), GELU, fc2 columns (no
//                    bias: b_fc2 is added once by the caller).
// Distillation (spd_student_block.h) trains these; head grouping runs them to score a grouping.
// Every layer works on rows: x (M, C) with M = sequences * tokens, except attention's (B, T, C).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "worker/layer.h"
#include "worker/layers/activation.h"
#include "worker/layers/attention.h"
#include "worker/layers/layernorm.h"
#include "worker/layers/linear.h"
#include "worker/tp/transformer_weights.h"

namespace qsync {

struct BlockInputs;  // worker/tp/spd_recovery.h

// The block's sizes, checked against its weights.
struct BlockShape {
  int64_t width = 0;      // C
  int64_t heads = 0;      // H
  int64_t mlp_width = 0;  // F
  bool causal = true;
  int64_t head_size() const { return width / heads; }
};
// Throws std::invalid_argument naming `block` when a weight array has the wrong size.
BlockShape block_shape_check(const BlockWeights& b, int64_t width, int64_t mlp_width, bool causal, int64_t block);

// A LayerNorm over C holding `gain` and `bias`.
std::unique_ptr<LayerNormLayer> layernorm_from(const std::string& name, const std::vector<float>& gain,
                                               const std::vector<float>& bias, MemoryAccount* memory);
void layernorm_store(LayerNormLayer& ln, std::vector<float>& gain, std::vector<float>& bias);

// The attention of `heads` (global ids, in this order): x (B, T, C) -> y (B, T, C) without b_O.
std::unique_ptr<AttentionLayer> attention_shard(const BlockWeights& b, const BlockShape& shape,
                                                const std::vector<int>& heads, const std::string& name,
                                                MemoryAccount* memory);
void attention_shard_store(AttentionLayer& attn, const BlockShape& shape, const std::vector<int>& heads,
                           BlockWeights& b);

// MLP slice `slice` of `slices`: x (M, C) -> z (M, C) without b_fc2.
class MlpShard {
 public:
  MlpShard(const BlockWeights& b, const BlockShape& shape, int slice, int slices, const std::string& name,
           MemoryAccount* memory);
  Tensor forward(const Tensor& x, StepContext& ctx);    // (M, C) -> (M, C)
  Tensor backward(const Tensor& dz, StepContext& ctx);  // (M, C) -> dx (M, C)
  void collect_parameters(std::vector<Parameter*>& out);
  void store(BlockWeights& b) const;

 private:
  BlockShape shape_;
  int slice_, slices_;
  std::unique_ptr<LinearLayer> fc1_;  // (F/N, C) + bias
  std::unique_ptr<GeluLayer> gelu_;
  std::unique_ptr<LinearLayer> fc2_;  // (C, F/N), no bias
};

// Checks `block` and the calibration inputs against the model (block out of range, wrong width,
// wrong value count, windows past the model's positions: std::invalid_argument naming the fix)
// and returns the block's shape. Distillation and head grouping start with it
// (defined in spd_block_inputs.cpp).
BlockShape spd_recovery_block_shape(const TransformerWeights& w, int64_t block, const BlockInputs& inputs);

// A (C) vector as a parameter that is never decayed (b_O, b_fc2).
Parameter bias_parameter(const std::string& name, const std::vector<float>& value, MemoryAccount* memory);

}  // namespace qsync
