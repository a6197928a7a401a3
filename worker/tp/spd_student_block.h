// File: worker/tp/spd_student_block.h
// One transformer block run as N rank shards with its attention sync dropped (SPD), on the
// training engine's layers, so that it can be trained (block-to-block distillation). The
// arithmetic is TpTransformer's SPD block (worker/tp/tp_transformer.h), rank i of N:
//   A     = LN1(X)                                   (replicated; computed once)
//   Y_i   = Attn_i(A)                                its heads' QKV rows and W_O columns, no bias
//   H_i   = X + Y_i + b_O
//   Z_i   = MLP_i(LN2(H_i))                          its fc1 rows / fc2 columns, no fc2 bias
//   out   = X + sum_i (Y_i + Z_i) + b_O + b_fc2
// With one rank this is exactly the block with its sync (H = X + Y + b_O, out = H + Z + b_fc2),
// which is how distillation computes the teacher. Replicated parameters (LN1, LN2, b_O, b_fc2)
// are kept once; their gradient is the sum over the ranks' uses. The four LN2 applications run
// as one LayerNorm over the ranks' H_i stacked row-wise.
//
//   SpdStudentBlock s(w.blocks[b], shape, layout.heads_of_rank[b], layout.mlp_slice_of_rank[b]);
//   Tensor out = s.forward(x, ctx);          // x, out (S, T, C)
//   s.backward(dout, ctx);                   // accumulates every parameter's gradient
//   BlockWeights trained = s.weights();      // the unsharded layout again
#pragma once

#include <memory>
#include <vector>

#include "worker/tp/spd_block_shards.h"

namespace qsync {

class SpdStudentBlock {
 public:
  // heads_of_rank [rank] -> global heads; mlp_slice_of_rank [rank] -> slice (a permutation).
  SpdStudentBlock(const BlockWeights& block, const BlockShape& shape, const std::vector<std::vector<int>>& heads_of_rank,
                  const std::vector<int>& mlp_slice_of_rank, MemoryAccount* memory = nullptr);
  int ranks() const { return int(attn_.size()); }

  // x (S, T, C) -> out (S, T, C). ctx.training keeps what backward needs.
  Tensor forward(const Tensor& x, StepContext& ctx);
  // dout (S, T, C): adds each parameter's gradient (the input gradient is not needed).
  void backward(const Tensor& dout, StepContext& ctx);

  std::vector<Parameter*> parameters();
  void zero_grad();
  // The current weights in the block's unsharded layout (heads and slices back in place).
  BlockWeights weights() const;

 private:
  BlockShape shape_;
  std::vector<std::vector<int>> heads_of_rank_;
  std::vector<int> mlp_slice_of_rank_;
  std::unique_ptr<LayerNormLayer> ln1_, ln2_;
  std::vector<std::unique_ptr<AttentionLayer>> attn_;  // [rank]
  std::vector<std::unique_ptr<MlpShard>> mlp_;         // [rank]
  Parameter proj_bias_, fc2_bias_;                     // b_O, b_fc2 (C)
  Shape x_shape_;                                      // (S, T, C) of the training forward
};

}  // namespace qsync
