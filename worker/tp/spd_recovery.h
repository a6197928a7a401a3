// File: worker/tp/spd_recovery.h
// Recovery of SPD blocks that do not tolerate the dropped sync zero-shot (the SPD paper's B2B and HG):
//   calibration inputs   each block's input X on calibration text, from the exact simulation;
//   distillation (B2B)   train only the SPD version of one block (all its weights, on the
//                        training engine's layers and optimizer) to match the original TP block's
//                        output (MSE) on those inputs;
//   head grouping (HG)   assign heads to ranks so that the heads on one rank are diverse by their
//                        attention maps on calibration data (within-rank Euclidean distance
//                        maximised), then pair head groups with MLP slices by the norm of the MLP
//                        output (before the residual); then distil.
// The teacher is always the block with its sync, whose output does not depend on the layout.
#pragma once

#include <cstdint>
#include <vector>

#include "worker/tp/transformer_weights.h"

namespace qsync {

class TpTransformer;

// Block inputs of `block`, (S, T, C) row-major: S = the windows scored, T = window, from the
// simulation running with its current dropped set (the blocks before `block` as deployed). Window
// k of `tokens` starts at k * stride (0: window, consecutive text).
struct BlockInputs {
  int64_t sequences = 0;  // S
  int64_t tokens = 0;     // T
  int64_t width = 0;      // C
  std::vector<float> x;   // (S, T, C)
};
BlockInputs spd_block_inputs(TpTransformer& sim, const std::vector<int32_t>& tokens, int64_t window,
                             int64_t max_windows, int64_t block, int64_t stride = 0);

struct DistillConfig {
  int64_t epochs = 10;
  double lr = 1e-3;           // AdamW
  int64_t batch_sequences = 8;
  double holdout_fraction = 0.2;  // of the inputs, never trained on: the reported held-out MSE
  uint64_t seed = 1;
};

struct DistillReport {
  double train_mse_before = 0, train_mse_after = 0;
  double heldout_mse_before = 0, heldout_mse_after = 0;
  int64_t steps = 0;
  double seconds = 0;
};

struct DistilledBlock {
  BlockWeights weights;  // the SPD block's new weights (valid for `layout` with the sync dropped)
  DistillReport report;
};

// Block-to-block distillation of `block` under `layout` (the teacher: the same block of `w` with
// its sync). Throws std::invalid_argument for a block out of range or inputs of the wrong width.
DistilledBlock spd_distill_block(const TransformerWeights& w, const TpLayout& layout, int64_t block,
                                 const BlockInputs& inputs, const DistillConfig& config);

struct HeadGrouping {
  std::vector<std::vector<int>> heads_of_rank;  // [rank] -> heads
  std::vector<int> mlp_slice_of_rank;            // [rank] -> MLP slice
  double within_rank_distance = 0;               // the objective: summed pairwise distance inside ranks
  double contiguous_distance = 0;                // the same for the contiguous layout, for the report
  double mlp_output_norm = 0;           // the pairing's objective: summed |MLP output| of the chosen pairs
  double identity_mlp_output_norm = 0;  // the same with group r on slice r, for the report
};

// Head grouping of `block` for `ranks` ranks from its calibration inputs: exhaustive over the
// unordered equal splits when there are at most 200000 (H=8 N=4: 105), else best-swap local search
// from the contiguous split (worker/tp/spd_head_grouping.cpp). Throws std::invalid_argument for a
// block out of range, inputs of the wrong width, or `ranks` not dividing the heads / MLP width.
HeadGrouping spd_head_grouping(const TransformerWeights& w, int64_t block, int ranks, const BlockInputs& inputs);

// `layout` with block `block`'s heads and MLP slices replaced by the grouping's.
TpLayout tp_layout_with_grouping(const TpLayout& layout, int64_t block, const HeadGrouping& grouping);

}  // namespace qsync
