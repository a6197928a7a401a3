// File: worker/tp/spd_selection.cpp
// The SPD drop set under an accuracy budget: blocks in ascending sensitivity, each tried with the
// strategies its class and --strategy allow (zero-shot; block-to-block distillation; head grouping
// then distillation), kept only when the measured calibration metric of the whole drop set stays
// within the budget. Recovery fits the blocks' inputs (as currently deployed) on the calibration's
// recovery tokens, the budget is checked on its other tokens.
// Rules: worker/tp/spd_sensitivity.h.
#include <algorithm>
#include <stdexcept>

#include "worker/tp/spd_sensitivity.h"

namespace qsync {
namespace {

// Blocks in the order they are offered: ascending progressive sensitivity, then alone, then the
// later block first (the paper's last-to-first order).
std::vector<SpdBlockSensitivity> offer_order(std::vector<SpdBlockSensitivity> blocks) {
  std::stable_sort(blocks.begin(), blocks.end(), [](const SpdBlockSensitivity& a, const SpdBlockSensitivity& b) {
    if (a.progressive != b.progressive) return a.progressive < b.progressive;
    if (a.alone != b.alone) return a.alone < b.alone;
    return a.block > b.block;
  });
  return blocks;
}

struct Deployed {
  TransformerWeights weights;
  TpLayout layout;
  std::vector<bool> dropped;
};

// Block `block`'s calibration inputs with the blocks before it as deployed.
BlockInputs deployed_inputs(const Deployed& d, const SpdCalibration& cal, int64_t block) {
  TpTransformer sim = tp_simulation(d.weights, d.layout);
  sim.set_dropped(d.dropped);
  return spd_block_inputs(sim, cal.recovery_tokens.empty() ? cal.tokens : cal.recovery_tokens, cal.window,
                          cal.windows, block, cal.stride);
}

// `d` with `block` dropped under `strategy` (its weights and layout changed as the recovery says);
// the attempt's recovery figures go to `attempt`.
Deployed recovered(const Deployed& d, const SpdCalibration& cal, int64_t block, SpdStrategy strategy,
                   const DistillConfig& distill, SpdAttempt& attempt) {
  Deployed c = d;
  c.dropped[size_t(block)] = true;
  if (strategy == SpdStrategy::ZERO_SHOT) return c;
  const BlockInputs inputs = deployed_inputs(d, cal, block);
  if (strategy == SpdStrategy::HEAD_GROUPED) {
    const HeadGrouping g = spd_head_grouping(c.weights, block, c.layout.ranks, inputs);
    c.layout.heads_of_rank[size_t(block)] = g.heads_of_rank;
    c.layout.mlp_slice_of_rank[size_t(block)] = g.mlp_slice_of_rank;
    tp_layout_check(c.weights, c.layout);
    attempt.within_rank_distance = g.within_rank_distance;
    attempt.contiguous_distance = g.contiguous_distance;
  }
  DistilledBlock distilled = spd_distill_block(c.weights, c.layout, block, inputs, distill);
  c.weights.blocks[size_t(block)] = std::move(distilled.weights);
  attempt.distill = distilled.report;
  return c;
}

}  // namespace

SpdSelection spd_select_blocks(const TransformerWeights& weights, const TpLayout& layout, const SpdCalibration& cal,
                               const std::vector<SpdBlockSensitivity>& blocks, const SpdBudget& budget,
                               const TpQuality& tp, SpdStrategyLimit limit, const DistillConfig& distill) {
  const int64_t L = int64_t(weights.blocks.size());
  tp_layout_check(weights, layout);
  Deployed current{weights, layout, std::vector<bool>(size_t(L), false)};
  SpdSelection sel;
  sel.planned = tp;
  for (const SpdBlockSensitivity& b : offer_order(blocks)) {
    if (b.block < 0 || b.block >= L)
      throw std::invalid_argument("spd_select_blocks: block " + std::to_string(b.block) + " is not a block of the " +
                                  std::to_string(L) + "-block model");
    if (current.dropped[size_t(b.block)])
      throw std::invalid_argument("spd_select_blocks: block " + std::to_string(b.block) + " is listed twice");
    for (SpdStrategy strategy : spd_strategy_ladder(b.block_class, limit)) {
      SpdAttempt attempt;
      attempt.block = b.block;
      attempt.strategy = strategy;
      Deployed candidate = recovered(current, cal, b.block, strategy, distill, attempt);
      attempt.quality = spd_calibration_quality(candidate.weights, candidate.layout, candidate.dropped, cal);
      attempt.accepted = spd_within_budget(budget, tp, attempt.quality);
      sel.attempts.push_back(attempt);
      if (!attempt.accepted) continue;
      current = std::move(candidate);
      sel.dropped.push_back({b.block, strategy});
      sel.planned = attempt.quality;
      sel.weights_changed = sel.weights_changed || strategy != SpdStrategy::ZERO_SHOT;
      sel.layout_changed = sel.layout_changed || strategy == SpdStrategy::HEAD_GROUPED;
      break;
    }
  }
  sel.weights = std::move(current.weights);
  sel.layout = std::move(current.layout);
  return sel;
}

}  // namespace qsync
