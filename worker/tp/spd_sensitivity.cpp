// File: worker/tp/spd_sensitivity.cpp
// SPD sensitivity on calibration text (progressive, as the paper, and one block alone), the
// default thresholds, classification, the budget test and the strategy ladders of --strategy.
// The drop-set selection is in spd_selection.cpp. Rules: worker/tp/spd_sensitivity.h.
#include "worker/tp/spd_sensitivity.h"

#include <cmath>
#include <stdexcept>

namespace qsync {

TpQuality spd_calibration_quality(const TransformerWeights& weights, const TpLayout& layout,
                                  const std::vector<bool>& dropped, const SpdCalibration& cal) {
  TpTransformer sim = tp_simulation(weights, layout);
  sim.set_dropped(dropped);
  return tp_evaluate(sim, cal.tokens, cal.window, cal.windows, TP_EVALUATE_BATCH, cal.stride);
}

SpdSensitivity spd_measure_sensitivity(const TransformerWeights& weights, const TpLayout& layout,
                                       const SpdCalibration& cal) {
  const int64_t L = int64_t(weights.blocks.size());
  if (L < 1) throw std::invalid_argument("spd_measure_sensitivity: the model has no transformer block");
  TpTransformer sim = tp_simulation(weights, layout);
  auto quality = [&](const std::vector<bool>& dropped) {
    sim.set_dropped(dropped);
    return tp_evaluate(sim, cal.tokens, cal.window, cal.windows, TP_EVALUATE_BATCH, cal.stride);
  };
  SpdSensitivity s;
  s.tp = quality(std::vector<bool>(size_t(L), false));
  s.progressive_quality.resize(size_t(L + 1));
  s.progressive_quality[size_t(L)] = s.tp;
  std::vector<bool> dropped(size_t(L), false);
  for (int64_t i = L - 1; i >= 0; --i) {  // SPD on i..L-1
    dropped[size_t(i)] = true;
    s.progressive_quality[size_t(i)] = quality(dropped);
  }
  s.all_spd = s.progressive_quality[0];
  s.blocks.resize(size_t(L));
  for (int64_t i = 0; i < L; ++i) {
    std::vector<bool> alone(size_t(L), false);
    alone[size_t(i)] = true;
    SpdBlockSensitivity& b = s.blocks[size_t(i)];
    b.block = i;
    b.progressive = s.progressive_quality[size_t(i)].perplexity - s.progressive_quality[size_t(i + 1)].perplexity;
    b.alone = quality(alone).perplexity - s.tp.perplexity;
  }
  return s;
}

SpdThresholds spd_default_thresholds(const SpdBudget& budget, double perplexity_tp, int64_t blocks) {
  if (blocks < 1) throw std::invalid_argument("spd_default_thresholds: the model has no transformer block");
  const double in_perplexity = budget.limit * perplexity_tp;
  return {in_perplexity / double(blocks), in_perplexity};
}

void spd_classify_blocks(std::vector<SpdBlockSensitivity>& blocks, double tau1, double tau2) {
  if (tau1 > tau2)
    throw std::invalid_argument("SPD thresholds: tau1 (" + std::to_string(tau1) + ") must not exceed tau2 (" +
                                std::to_string(tau2) + "); pass --tau1 <= --tau2");
  for (SpdBlockSensitivity& b : blocks) b.block_class = spd_classify(b.progressive, tau1, tau2);
}

double standard_normal_quantile(double p) {
  if (!(p > 0 && p < 1)) throw std::invalid_argument("standard_normal_quantile: p must be in (0, 1)");
  double lo = -40, hi = 40;  // bisection on the CDF 0.5 erfc(-z / sqrt 2): exact to the last bits
  for (int i = 0; i < 200 && hi - lo > 1e-15; ++i) {
    const double mid = 0.5 * (lo + hi);
    (0.5 * std::erfc(-mid / std::sqrt(2.0)) < p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

SpdBudgetCheck spd_budget_check(const SpdBudget& budget, const TpQuality& tp, const TpQuality& planned) {
  const bool ppl = budget.metric == SpdBudgetMetric::PERPLEXITY;
  SpdBudgetCheck c;
  c.change = ppl ? planned.perplexity / tp.perplexity - 1.0 : tp.accuracy - planned.accuracy;
  c.upper = c.change;
  const std::vector<double>& a = ppl ? planned.window_loss : tp.window_accuracy;  // change = a - b per window
  const std::vector<double>& b = ppl ? tp.window_loss : planned.window_accuracy;
  const size_t n = a.size();
  const bool paired = budget.confidence > 0 && n >= 2 && b.size() == n;
  if (paired) {
    double mean = 0, square = 0;
    for (size_t w = 0; w < n; ++w) mean += a[w] - b[w];
    mean /= double(n);
    for (size_t w = 0; w < n; ++w) square += (a[w] - b[w] - mean) * (a[w] - b[w] - mean);
    const double standard_error = std::sqrt(square / double(n - 1) / double(n));
    const double bound = mean + standard_normal_quantile(budget.confidence) * standard_error;
    c.upper = ppl ? std::exp(bound) - 1.0 : bound;
  }
  // The point test in its own terms (as before the bound), so a plan at confidence 0 is unchanged.
  c.within = paired ? c.upper <= budget.limit
                 : (ppl ? planned.perplexity <= tp.perplexity * (1.0 + budget.limit) : c.change <= budget.limit);
  return c;
}

bool spd_within_budget(const SpdBudget& budget, const TpQuality& tp, const TpQuality& planned) {
  return spd_budget_check(budget, tp, planned).within;
}

SpdStrategyLimit spd_strategy_limit_from_name(const std::string& name) {
  for (SpdStrategyLimit l : {SpdStrategyLimit::ZERO_SHOT, SpdStrategyLimit::DISTILL, SpdStrategyLimit::HEAD_GROUP,
                             SpdStrategyLimit::AUTO})
    if (name == spd_strategy_limit_name(l)) return l;
  throw std::invalid_argument("--strategy '" + name +
                              "' is not one of zero-shot (no recovery), distill (zero-shot, then distillation), "
                              "head-group (all three) or auto (by block class)");
}

const char* spd_strategy_limit_name(SpdStrategyLimit limit) {
  switch (limit) {
    case SpdStrategyLimit::ZERO_SHOT: return "zero-shot";
    case SpdStrategyLimit::DISTILL: return "distill";
    case SpdStrategyLimit::HEAD_GROUP: return "head-group";
    case SpdStrategyLimit::AUTO: return "auto";
  }
  return "?";
}

std::vector<SpdStrategy> spd_strategy_ladder(SpdBlockClass block_class, SpdStrategyLimit limit) {
  const std::vector<SpdStrategy> all = {SpdStrategy::ZERO_SHOT, SpdStrategy::DISTILLED, SpdStrategy::HEAD_GROUPED};
  switch (limit) {
    case SpdStrategyLimit::ZERO_SHOT: return {all.begin(), all.begin() + 1};
    case SpdStrategyLimit::DISTILL: return {all.begin(), all.begin() + 2};
    case SpdStrategyLimit::HEAD_GROUP: return all;
    case SpdStrategyLimit::AUTO: break;
  }
  const size_t start = block_class == SpdBlockClass::INSENSITIVE ? 0 : block_class == SpdBlockClass::SENSITIVE ? 1 : 2;
  return {all.begin() + std::ptrdiff_t(start), all.end()};
}

}  // namespace qsync
