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
  double lo = -40, hi = 40;  // bisection on the CDF 0.5 erfc(-z / sqrt 2), to a width of 1e-15
  for (int i = 0; i < 200 && hi - lo > 1e-15; ++i) {
    const double mid = 0.5 * (lo + hi);
    (0.5 * std::erfc(-mid / std::sqrt(2.0)) < p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

double student_t_quantile(double p, int64_t dof) {
  if (dof < 1) throw std::invalid_argument("student_t_quantile: needs at least 1 degree of freedom");
  // Abramowitz & Stegun 26.7.5: the expansion of t_p in powers of 1/dof around the normal z_p.
  const double z = standard_normal_quantile(p), n = double(dof), z2 = z * z;
  const double g1 = (z2 + 1) * z / 4;
  const double g2 = ((5 * z2 + 16) * z2 + 3) * z / 96;
  const double g3 = (((3 * z2 + 19) * z2 + 17) * z2 - 15) * z / 384;
  const double g4 = ((((79 * z2 + 776) * z2 + 1482) * z2 - 1920) * z2 - 945) * z / 92160;
  return z + g1 / n + g2 / (n * n) + g3 / (n * n * n) + g4 / (n * n * n * n);
}

SpdBudgetCheck spd_budget_check(const SpdBudget& budget, const TpQuality& tp, const TpQuality& planned) {
  const bool ppl = budget.metric == SpdBudgetMetric::PERPLEXITY;
  SpdBudgetCheck c;
  c.change = ppl ? planned.perplexity / tp.perplexity - 1.0 : tp.accuracy - planned.accuracy;
  c.upper = c.change;
  if (budget.confidence <= 0) {  // the point test in its own terms, as before the bound
    c.within = ppl ? planned.perplexity <= tp.perplexity * (1.0 + budget.limit) : c.change <= budget.limit;
    return c;
  }
  const std::vector<double>& a = ppl ? planned.window_loss : tp.window_accuracy;  // change = a - b per window
  const std::vector<double>& b = ppl ? tp.window_loss : planned.window_accuracy;
  const size_t n = a.size();
  if (b.size() != n)
    throw std::logic_error("spd_budget_check: the two evaluations scored " + std::to_string(b.size()) + " and " +
                           std::to_string(n) + " windows; a paired bound needs the same windows");
  if (n < 2)
    throw std::invalid_argument("the SPD budget's confidence bound needs at least 2 budget windows, the calibration "
                                "has " + std::to_string(n) + "; pass more --windows (or --confidence 0 to test the "
                                "measured change)");
  double mean = 0, square = 0;
  for (size_t w = 0; w < n; ++w) mean += a[w] - b[w];
  mean /= double(n);
  for (size_t w = 0; w < n; ++w) square += (a[w] - b[w] - mean) * (a[w] - b[w] - mean);
  const double standard_error = std::sqrt(square / double(n - 1) / double(n));
  const double bound = mean + student_t_quantile(budget.confidence, int64_t(n) - 1) * standard_error;
  c.upper = ppl ? std::exp(bound) - 1.0 : bound;
  c.within = c.upper <= budget.limit;
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
