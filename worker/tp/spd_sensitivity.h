// File: worker/tp/spd_sensitivity.h
// Sync-Point Drop planning on calibration text, with the exact N-rank simulation
// (worker/tp/tp_transformer.h): how much each block's dropped attention sync costs in perplexity,
// the block classes, and the drop set chosen under an accuracy budget with the recovery each
// dropped block needs (worker/tp/spd_recovery.h).
//
// Sensitivity (L blocks, PPL on the calibration windows, tp_evaluate):
//   progressive  (the SPD paper) blocks switch to SPD one at a time from the last towards the first:
//                s_i = PPL(SPD on i..L-1) - PPL(SPD on i+1..L-1); the s_i telescope to
//                PPL(SPD on every block) - PPL(TP).
//   alone        s_i = PPL(SPD on block i only) - PPL(TP).
// Classes (planner/spd_plan.h, spd_classify) use the progressive sensitivity. Default thresholds
// (spd_default_thresholds), with B the budget in perplexity units (B = limit * PPL(TP) for a
// perplexity budget; an accuracy budget of d points uses the same rule with limit = d):
//   tau1 = B / L   a block at or below it may join with every other block and the sum stays in budget
//   tau2 = B       a block above it spends the whole budget alone
// Selection (spd_select_blocks): blocks in ascending progressive sensitivity (ties: smaller alone,
// then the later block); each is tried with the strategies its class and --strategy allow, cheapest
// first, and joins the drop set only if the MEASURED calibration metric of the whole set stays
// within the budget; a block that fits with no allowed strategy keeps its sync.
//
//   SpdCalibration cal{check_tokens, /*window=*/64, /*windows=*/32, fit_tokens};
//   SpdSensitivity s = spd_measure_sensitivity(weights, layout, cal);
//   spd_classify_blocks(s.blocks, t.tau1, t.tau2);
//   SpdSelection sel = spd_select_blocks(weights, layout, cal, s.blocks, budget, s.tp, SpdStrategyLimit::AUTO, {});
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/spd_plan.h"
#include "worker/tp/spd_recovery.h"
#include "worker/tp/tp_transformer.h"
#include "worker/tp/transformer_weights.h"

namespace qsync {

// Calibration text: token ids (the corpus' training split) scored in `windows` windows of `window`
// tokens (0 = every window the tokens hold).
struct SpdCalibration {
  std::vector<int32_t> tokens;
  int64_t window = 64;
  int64_t windows = 32;
  int64_t stride = 0;  // window k of `tokens` (and of `recovery_tokens`) starts at k * stride (0:
                       // window; window + 1: each window carries its own last target, as
                       // char_heldout_windows' parts)
  // The inputs distillation and head grouping fit (the same windowing), disjoint from `tokens`
  // so that the budget is checked on text the recovered blocks were not trained on; empty: fit
  // on `tokens` too.
  std::vector<int32_t> recovery_tokens;
};

// The calibration quality of the simulation of `weights` under `layout` with `dropped` blocks.
TpQuality spd_calibration_quality(const TransformerWeights& weights, const TpLayout& layout,
                                  const std::vector<bool>& dropped, const SpdCalibration& cal);

struct SpdSensitivity {
  TpQuality tp;       // every sync kept
  TpQuality all_spd;  // SPD on every block
  // [i] = calibration quality with SPD on blocks i..L-1 (i = 0..L-1); [L] = tp.
  std::vector<TpQuality> progressive_quality;
  std::vector<SpdBlockSensitivity> blocks;  // [block]; block_class INSENSITIVE until classified
};
SpdSensitivity spd_measure_sensitivity(const TransformerWeights& weights, const TpLayout& layout,
                                       const SpdCalibration& cal);

struct SpdThresholds {
  double tau1 = 0, tau2 = 0;
};
// The default rule above. Throws std::invalid_argument for blocks < 1.
SpdThresholds spd_default_thresholds(const SpdBudget& budget, double perplexity_tp, int64_t blocks);
// Sets each block's class from its progressive sensitivity.
void spd_classify_blocks(std::vector<SpdBlockSensitivity>& blocks, double tau1, double tau2);

// The budget test of `planned` against `tp`, evaluated on the same windows. The change is the
// relative perplexity increase (planned / tp - 1) or the accuracy drop (tp - planned). With
// budget.confidence c > 0, `upper` is the one-sided upper c bound of the change from the paired
// per-window differences (mean + t_c(n - 1) * standard error, Student's t over n windows; for
// perplexity on the window losses, then exp(.) - 1), so a drop set passes on evidence rather than
// on a favourable sample: the selection adds blocks while the test passes, and a point estimate
// lets it pick up sampling error. c > 0 needs both sides' per-window results over the same n >= 2
// windows (throws otherwise, naming --windows); with c = 0, upper = change (the point test).
struct SpdBudgetCheck {
  double change = 0, upper = 0;
  bool within = false;  // upper <= budget.limit
};
SpdBudgetCheck spd_budget_check(const SpdBudget& budget, const TpQuality& tp, const TpQuality& planned);
bool spd_within_budget(const SpdBudget& budget, const TpQuality& tp, const TpQuality& planned);
// z with P(N(0, 1) <= z) = p, for p in (0, 1).
double standard_normal_quantile(double p);
// t with P(T_dof <= t) = p (Student's t; the A&S 26.7.5 expansion: within 1e-3 from 3 degrees of
// freedom at p <= 0.99, exact in the limit).
double student_t_quantile(double p, int64_t dof);

// What --strategy allows: zero-shot only; zero-shot then distillation; all three; or auto: the
// block's class picks where to start (insensitive: zero-shot, sensitive: distilled, extremely
// sensitive: head-grouped) and a block that misses the budget tries the stronger ones after it.
enum class SpdStrategyLimit { ZERO_SHOT, DISTILL, HEAD_GROUP, AUTO };
// "zero-shot" | "distill" | "head-group" | "auto"; throws listing them.
SpdStrategyLimit spd_strategy_limit_from_name(const std::string& name);
const char* spd_strategy_limit_name(SpdStrategyLimit limit);
// The strategies tried for a block, cheapest first.
std::vector<SpdStrategy> spd_strategy_ladder(SpdBlockClass block_class, SpdStrategyLimit limit);

// One strategy tried on one block (the selection's log, for the report).
struct SpdAttempt {
  int64_t block = 0;
  SpdStrategy strategy = SpdStrategy::ZERO_SHOT;
  TpQuality quality;  // calibration quality of the drop set with this block added
  bool accepted = false;
  DistillReport distill;  // distilled and head-grouped attempts
  double within_rank_distance = 0, contiguous_distance = 0;  // head-grouped attempts
};

struct SpdSelection {
  std::vector<SpdDroppedBlock> dropped;  // in the order they joined
  TransformerWeights weights;            // deployed weights: distilled blocks replaced
  TpLayout layout;                       // deployed layout: head-grouped blocks regrouped
  bool weights_changed = false;          // some block was distilled
  bool layout_changed = false;           // some block was head-grouped
  TpQuality planned;                     // calibration quality of the final set (= tp when none)
  std::vector<SpdAttempt> attempts;
};
SpdSelection spd_select_blocks(const TransformerWeights& weights, const TpLayout& layout, const SpdCalibration& cal,
                               const std::vector<SpdBlockSensitivity>& blocks, const SpdBudget& budget,
                               const TpQuality& tp, SpdStrategyLimit limit, const DistillConfig& distill);

}  // namespace qsync
