// File: tests/worker/tp/spd_sensitivity_test.cpp
// Tests of SPD planning (worker/tp/spd_sensitivity.h, spd_latency.h, spd_plan_command.h) on a
// 4-block, width-32 char-GPT trained here by `train_run` for 60 steps on generated English-like
// text: the progressive sensitivities telescope to PPL(SPD everywhere) - PPL(TP) and match
// independent evaluations; the drop set keeps the MEASURED calibration metric within the budget
// (perplexity and accuracy budgets, a binding budget, a zero budget, a generous one); recovery
// attempts follow the strategy ladders and change only the blocks they drop; the latency
// prediction's arithmetic and all-reduce sources; and `spd-plan` end to end (the plan file, a plan
// for another model refused, bad input refused).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>

#include "planner/device_profile.h"
#include "planner/model_desc.h"
#include "planner/spd_plan.h"
#include "tests/worker/tp/tiny_gpt.h"
#include "worker/data/char_corpus.h"
#include "worker/dist/link_model.h"
#include "worker/tp/spd_latency.h"
#include "worker/tp/spd_plan_command.h"
#include "worker/tp/spd_sensitivity.h"
#include "worker/trainer.h"

namespace qsync {
namespace {

constexpr int BLOCKS = 4;

// Sentences from a small grammar: enough structure for 60 steps to learn something.
std::string generated_text(int64_t chars, uint64_t seed) {
  const std::vector<std::string> who = {"the cat", "a dog", "my friend", "the old man", "her sister", "we"};
  const std::vector<std::string> did = {"sat on", "looked at", "ran to", "found", "painted", "forgot"};
  const std::vector<std::string> what = {"the mat", "a red door", "the river", "an apple", "the garden", "it"};
  std::mt19937_64 rng(seed);
  std::string text;
  while (int64_t(text.size()) < chars) {
    std::string s = who[rng() % who.size()] + " " + did[rng() % did.size()] + " " + what[rng() % what.size()];
    s[0] = char(std::toupper(static_cast<unsigned char>(s[0])));
    text += s + (rng() % 4 == 0 ? ".\n" : ". ");
  }
  return text;
}

struct Trained {
  test::ScratchDir dir;
  std::string model_file, data_file, checkpoint_dir;
  ModelDesc desc;
  TransformerWeights weights;
  SpdCalibration cal;
};

void train_into(Trained& r) {
  r.model_file = r.dir.write("spd-gpt.yaml", test::tiny_gpt_yaml("spd-gpt", BLOCKS, 32, 4));
  r.data_file = r.dir.write("corpus.txt", generated_text(24000, 11));
  r.checkpoint_dir = r.dir.file("ckpt");
  TrainConfig c;
  c.model = r.model_file;
  c.data = r.data_file;
  c.steps = 60;
  c.batch = 16;
  c.optimizer.lr = 3e-3;
  c.checkpoint_dir = r.checkpoint_dir;
  c.quiet = true;
  train_run(c);
  r.desc = model_desc_load(r.model_file);
  r.weights = transformer_weights_load(r.model_file, r.checkpoint_dir);
  r.cal.tokens = char_corpus_load(r.data_file, 16, 0.1).train;
  r.cal.window = 16;
  r.cal.windows = 16;
}

// Trained once per test binary; the scratch directory goes at exit.
const Trained& trained() {
  static Trained t;
  static const bool ready = (train_into(t), true);
  (void)ready;
  return t;
}

std::vector<bool> mask_of(const std::vector<SpdDroppedBlock>& dropped) {
  std::vector<bool> m(BLOCKS, false);
  for (const SpdDroppedBlock& d : dropped) m[size_t(d.block)] = true;
  return m;
}

TEST(SpdSensitivity, ProgressiveSensitivitiesTelescopeAndMatchIndependentRuns) {
  const Trained& t = trained();
  const TpLayout layout = tp_layout_contiguous(t.weights, 2);
  const SpdSensitivity s = spd_measure_sensitivity(t.weights, layout, t.cal);
  const TpQuality tp = spd_calibration_quality(t.weights, layout, std::vector<bool>(BLOCKS, false), t.cal);
  const TpQuality all = spd_calibration_quality(t.weights, layout, std::vector<bool>(BLOCKS, true), t.cal);
  EXPECT_EQ(s.tp.perplexity, tp.perplexity);
  EXPECT_EQ(s.all_spd.perplexity, all.perplexity);
  EXPECT_GT(std::abs(all.perplexity - tp.perplexity), 1e-6) << "SPD on every block changed nothing";
  EXPECT_EQ(tp.positions, 16 * 16);
  ASSERT_EQ(s.blocks.size(), size_t(BLOCKS));
  double sum = 0;
  for (const SpdBlockSensitivity& b : s.blocks) sum += b.progressive;
  EXPECT_NEAR(sum, all.perplexity - tp.perplexity, 1e-9 * all.perplexity);
  for (int i = 0; i < BLOCKS; ++i) {
    EXPECT_EQ(s.blocks[size_t(i)].block, i);
    std::vector<bool> alone(BLOCKS, false), tail(BLOCKS, false);
    alone[size_t(i)] = true;
    for (int j = i; j < BLOCKS; ++j) tail[size_t(j)] = true;
    EXPECT_NEAR(s.blocks[size_t(i)].alone,
                spd_calibration_quality(t.weights, layout, alone, t.cal).perplexity - tp.perplexity, 1e-12);
    tail[size_t(i)] = false;  // SPD on i+1..L-1
    const double after = spd_calibration_quality(t.weights, layout, tail, t.cal).perplexity;
    tail[size_t(i)] = true;
    const double with = spd_calibration_quality(t.weights, layout, tail, t.cal).perplexity;
    EXPECT_NEAR(s.blocks[size_t(i)].progressive, with - after, 1e-12) << "block " << i;
  }
}

TEST(SpdSensitivity, DefaultThresholdsAndClasses) {
  const SpdThresholds t = spd_default_thresholds({SpdBudgetMetric::PERPLEXITY, 0.02}, 5.0, 4);
  EXPECT_DOUBLE_EQ(t.tau2, 0.1);
  EXPECT_DOUBLE_EQ(t.tau1, 0.025);
  std::vector<SpdBlockSensitivity> b = {{0, 0.01, 0, {}}, {1, 0.05, 0, {}}, {2, 0.2, 0, {}}};
  spd_classify_blocks(b, t.tau1, t.tau2);
  EXPECT_EQ(b[0].block_class, SpdBlockClass::INSENSITIVE);
  EXPECT_EQ(b[1].block_class, SpdBlockClass::SENSITIVE);
  EXPECT_EQ(b[2].block_class, SpdBlockClass::EXTREMELY_SENSITIVE);
  EXPECT_THROW(spd_classify_blocks(b, 0.2, 0.1), std::invalid_argument);
}

// Two evaluations on the same windows: `tp` and `planned` with per-window losses tp + d[w].
TpQuality with_window_losses(const std::vector<double>& losses) {
  TpQuality q;
  for (double l : losses) q.loss += l / double(losses.size());
  q.perplexity = std::exp(q.loss);
  q.window_loss = losses;
  q.window_accuracy.assign(losses.size(), 0.5);
  q.accuracy = 0.5;
  return q;
}

TEST(SpdBudgetCheck, BoundsThePairedChangeAtTheConfidence) {
  EXPECT_NEAR(standard_normal_quantile(0.5), 0.0, 1e-12);
  EXPECT_NEAR(standard_normal_quantile(0.9), 1.2815515655446004, 1e-9);
  EXPECT_NEAR(standard_normal_quantile(0.95), 1.6448536269514722, 1e-9);
  EXPECT_THROW(standard_normal_quantile(1.0), std::invalid_argument);
  // Student's t (tables: t_0.9 with 7 dof 1.4149, 47 dof 1.2998, 3 dof 1.6377): the expansion is
  // within 1e-3 from 3 degrees of freedom.
  EXPECT_NEAR(student_t_quantile(0.9, 7), 1.4149, 1e-3);
  EXPECT_NEAR(student_t_quantile(0.9, 47), 1.2998, 1e-3);
  EXPECT_NEAR(student_t_quantile(0.9, 3), 1.6377, 1e-3);
  EXPECT_NEAR(student_t_quantile(0.95, 1000000), 1.6448536269514722, 1e-5);  // t -> z

  const std::vector<double> base = {2.0, 2.2, 1.9, 2.1, 2.05, 1.95, 2.15, 2.0};
  std::vector<double> steady = base, noisy = base;  // both +0.5% in mean loss change
  const std::vector<double> swing = {0.04, -0.03, 0.05, -0.04, 0.03, -0.02, 0.05, -0.04};  // mean 0.005
  for (size_t w = 0; w < base.size(); ++w) {
    steady[w] += 0.005;
    noisy[w] += swing[w];
  }
  const TpQuality tp = with_window_losses(base);
  const SpdBudget point{SpdBudgetMetric::PERPLEXITY, 0.01, 0.0}, bound{SpdBudgetMetric::PERPLEXITY, 0.01, 0.9};
  // Measured change exp(0.005) - 1 = +0.50% on both: within +1% on the point test.
  for (const auto* planned : {&steady, &noisy}) {
    const SpdBudgetCheck c = spd_budget_check(point, tp, with_window_losses(*planned));
    EXPECT_NEAR(c.change, std::expm1(0.005), 1e-12);
    EXPECT_EQ(c.upper, c.change);
    EXPECT_TRUE(c.within);
  }
  // The same change every window: no spread, the bound is the change.
  const SpdBudgetCheck s = spd_budget_check(bound, tp, with_window_losses(steady));
  EXPECT_NEAR(s.upper, std::expm1(0.005), 1e-9);
  EXPECT_TRUE(s.within);
  // The same mean with a swing of +-4%: standard error sd / sqrt(8), sd of swing about 0.0414,
  // so the 90% bound (t with 7 dof) is 0.005 + 1.4149 * 0.01464 = +2.6%: over the budget.
  double mean = 0, square = 0;
  for (double x : swing) mean += x / 8;
  for (double x : swing) square += (x - mean) * (x - mean);
  const double expected = std::expm1(mean + student_t_quantile(0.9, 7) * std::sqrt(square / 7 / 8));
  const SpdBudgetCheck n = spd_budget_check(bound, tp, with_window_losses(noisy));
  EXPECT_NEAR(n.upper, expected, 1e-9);
  EXPECT_GT(n.upper, 0.02);
  EXPECT_FALSE(n.within);
  EXPECT_FALSE(spd_within_budget(bound, tp, with_window_losses(noisy)));

  // Accuracy: the drop tp - planned per window.
  TpQuality worse = tp;
  worse.window_accuracy = {0.49, 0.48, 0.5, 0.49, 0.5, 0.48, 0.49, 0.49};
  worse.accuracy = 0.49;
  const SpdBudgetCheck a = spd_budget_check({SpdBudgetMetric::ACCURACY, 0.02, 0.9}, tp, worse);
  EXPECT_NEAR(a.change, 0.01, 1e-12);
  EXPECT_GT(a.upper, a.change);
  EXPECT_TRUE(a.within);
  EXPECT_FALSE(spd_within_budget({SpdBudgetMetric::ACCURACY, 0.011, 0.9}, tp, worse));
  EXPECT_TRUE(spd_within_budget({SpdBudgetMetric::ACCURACY, 0.011, 0.0}, tp, worse));

  // A bound needs the same windows on both sides, at least two: refused, never a silent point test.
  const TpQuality one = with_window_losses({2.0}), other = with_window_losses({2.01});
  EXPECT_THROW(spd_budget_check(bound, one, other), std::invalid_argument);
  EXPECT_NO_THROW(spd_budget_check(point, one, other));
  EXPECT_THROW(spd_budget_check(bound, tp, with_window_losses({2.0, 2.1})), std::logic_error);
}

// tp_evaluate's per-window losses and accuracies average to its overall ones.
TEST(SpdBudgetCheck, EvaluationReportsEveryWindow) {
  const Trained& t = trained();
  const TpQuality q = spd_calibration_quality(t.weights, tp_layout_contiguous(t.weights, 2),
                                              std::vector<bool>(BLOCKS, false), t.cal);
  ASSERT_GE(q.window_loss.size(), size_t(2));
  EXPECT_EQ(q.window_accuracy.size(), q.window_loss.size());
  EXPECT_EQ(int64_t(q.window_loss.size()) * t.cal.window, q.positions);
  double loss = 0, accuracy = 0;
  for (size_t w = 0; w < q.window_loss.size(); ++w) {
    loss += q.window_loss[w] / double(q.window_loss.size());
    accuracy += q.window_accuracy[w] / double(q.window_loss.size());
  }
  EXPECT_NEAR(loss, q.loss, 1e-12);
  EXPECT_NEAR(accuracy, q.accuracy, 1e-12);
}

TEST(SpdSensitivity, StrategyLaddersFollowTheLimitAndTheClass) {
  using S = SpdStrategy;
  EXPECT_EQ(spd_strategy_ladder(SpdBlockClass::EXTREMELY_SENSITIVE, SpdStrategyLimit::ZERO_SHOT),
            std::vector<S>{S::ZERO_SHOT});
  EXPECT_EQ(spd_strategy_ladder(SpdBlockClass::INSENSITIVE, SpdStrategyLimit::DISTILL),
            (std::vector<S>{S::ZERO_SHOT, S::DISTILLED}));
  EXPECT_EQ(spd_strategy_ladder(SpdBlockClass::SENSITIVE, SpdStrategyLimit::HEAD_GROUP),
            (std::vector<S>{S::ZERO_SHOT, S::DISTILLED, S::HEAD_GROUPED}));
  EXPECT_EQ(spd_strategy_ladder(SpdBlockClass::SENSITIVE, SpdStrategyLimit::AUTO),
            (std::vector<S>{S::DISTILLED, S::HEAD_GROUPED}));
  EXPECT_EQ(spd_strategy_ladder(SpdBlockClass::EXTREMELY_SENSITIVE, SpdStrategyLimit::AUTO),
            std::vector<S>{S::HEAD_GROUPED});
  for (const char* name : {"zero-shot", "distill", "head-group", "auto"})
    EXPECT_STREQ(spd_strategy_limit_name(spd_strategy_limit_from_name(name)), name);
  EXPECT_THROW(spd_strategy_limit_from_name("distilled"), std::invalid_argument);
}

// The selection's claims checked against a fresh evaluation of what it deploys.
void expect_selection_within(const Trained& t, const SpdSelection& sel, const SpdBudget& budget, const TpQuality& tp) {
  const TpQuality again = spd_calibration_quality(sel.weights, sel.layout, mask_of(sel.dropped), t.cal);
  EXPECT_EQ(again.perplexity, sel.planned.perplexity);
  EXPECT_EQ(again.accuracy, sel.planned.accuracy);
  EXPECT_TRUE(spd_within_budget(budget, tp, again))
      << "planned ppl " << again.perplexity << " acc " << again.accuracy << " vs TP " << tp.perplexity << " / "
      << tp.accuracy;
  for (const SpdAttempt& a : sel.attempts) EXPECT_EQ(a.accepted, spd_within_budget(budget, tp, a.quality));
}

TEST(SpdSelection, ZeroShotPlanRespectsPerplexityAndAccuracyBudgets) {
  const Trained& t = trained();
  const TpLayout layout = tp_layout_contiguous(t.weights, 2);
  SpdSensitivity s = spd_measure_sensitivity(t.weights, layout, t.cal);
  spd_classify_blocks(s.blocks, 0, 0);
  const double all_increase = s.all_spd.perplexity / s.tp.perplexity - 1;
  ASSERT_GT(all_increase, 0) << "SPD on every block should cost perplexity on a trained model";

  // A budget of half the all-SPD increase binds: not every block fits.
  const SpdBudget half{SpdBudgetMetric::PERPLEXITY, all_increase / 2};
  const SpdSelection binding = spd_select_blocks(t.weights, layout, t.cal, s.blocks, half, s.tp,
                                                 SpdStrategyLimit::ZERO_SHOT, {});
  expect_selection_within(t, binding, half, s.tp);
  EXPECT_LT(binding.dropped.size(), size_t(BLOCKS));
  EXPECT_FALSE(binding.weights_changed);
  EXPECT_EQ(binding.attempts.size(), size_t(BLOCKS));  // one zero-shot try per block

  // A generous budget drops every block, and the result is SPD everywhere.
  const SpdBudget generous{SpdBudgetMetric::PERPLEXITY, 2 * all_increase};
  const SpdSelection every = spd_select_blocks(t.weights, layout, t.cal, s.blocks, generous, s.tp,
                                               SpdStrategyLimit::ZERO_SHOT, {});
  EXPECT_EQ(every.dropped.size(), size_t(BLOCKS));
  EXPECT_EQ(every.planned.perplexity, s.all_spd.perplexity);

  // A zero budget drops nothing that hurts.
  const SpdBudget zero{SpdBudgetMetric::PERPLEXITY, 0};
  const SpdSelection none = spd_select_blocks(t.weights, layout, t.cal, s.blocks, zero, s.tp,
                                              SpdStrategyLimit::ZERO_SHOT, {});
  expect_selection_within(t, none, zero, s.tp);
  EXPECT_LE(none.planned.perplexity, s.tp.perplexity);

  // Accuracy budget: half of the all-SPD accuracy drop (at least one position's worth).
  const double drop = std::max(s.tp.accuracy - s.all_spd.accuracy, 2.0 / double(s.tp.positions)) / 2;
  const SpdBudget acc{SpdBudgetMetric::ACCURACY, drop};
  const SpdSelection by_accuracy = spd_select_blocks(t.weights, layout, t.cal, s.blocks, acc, s.tp,
                                                     SpdStrategyLimit::ZERO_SHOT, {});
  expect_selection_within(t, by_accuracy, acc, s.tp);
}

TEST(SpdSelection, RecoveryFollowsTheLadderAndChangesOnlyDroppedBlocks) {
  const Trained& t = trained();
  const TpLayout layout = tp_layout_contiguous(t.weights, 2);
  SpdSensitivity s = spd_measure_sensitivity(t.weights, layout, t.cal);
  spd_classify_blocks(s.blocks, 0, 0);
  DistillConfig distill;
  distill.epochs = 3;
  // A zero budget: zero-shot rarely fits, so distillation and head grouping get their turns.
  const SpdBudget zero{SpdBudgetMetric::PERPLEXITY, 0};
  const SpdSelection sel = spd_select_blocks(t.weights, layout, t.cal, s.blocks, zero, s.tp,
                                             SpdStrategyLimit::HEAD_GROUP, distill);
  expect_selection_within(t, sel, zero, s.tp);
  // Per block: tries in ladder order, stopping at the first accepted.
  std::vector<std::vector<SpdStrategy>> tried(BLOCKS);
  for (const SpdAttempt& a : sel.attempts) {
    auto& seen = tried[size_t(a.block)];
    const SpdStrategy expected = seen.empty() ? SpdStrategy::ZERO_SHOT : SpdStrategy(int(seen.back()) + 1);
    ASSERT_EQ(a.strategy, expected) << "block " << a.block;
    seen.push_back(a.strategy);
    if (a.strategy != SpdStrategy::ZERO_SHOT) {
      EXPECT_GT(a.distill.steps, 0);
    }
  }
  bool distilled_tried = false;
  for (const auto& seen : tried) distilled_tried = distilled_tried || seen.size() > 1;
  const std::vector<bool> mask = mask_of(sel.dropped);
  const TpLayout contiguous = tp_layout_contiguous(t.weights, 2);
  for (int b = 0; b < BLOCKS; ++b) {
    SpdStrategy used = SpdStrategy::ZERO_SHOT;
    for (const SpdDroppedBlock& d : sel.dropped)
      if (d.block == b) used = d.strategy;
    const bool changed = sel.weights.blocks[size_t(b)].fc1_weight != t.weights.blocks[size_t(b)].fc1_weight;
    EXPECT_EQ(changed, mask[size_t(b)] && used != SpdStrategy::ZERO_SHOT) << "block " << b;
    if (!(mask[size_t(b)] && used == SpdStrategy::HEAD_GROUPED)) {
      EXPECT_EQ(sel.layout.heads_of_rank[size_t(b)], contiguous.heads_of_rank[size_t(b)]) << "block " << b;
    }
  }
  EXPECT_LE(sel.planned.perplexity, s.tp.perplexity);
  EXPECT_TRUE(distilled_tried || sel.dropped.size() == size_t(BLOCKS)) << "no block needed recovery";
}

TEST(SpdLatency, PredictionArithmeticAndAllreduceSources) {
  SpdDecodeTiming timing;
  timing.token_seconds = 1e-3;
  timing.block_seconds = 2e-4;
  const SpdDecodePrediction p = spd_predict_decode(timing, 5e-4, 4, 3);
  EXPECT_DOUBLE_EQ(p.decode_token_seconds_tp, 1e-3 + 8 * 5e-4);
  EXPECT_DOUBLE_EQ(p.decode_token_seconds_planned, 1e-3 + 5 * 5e-4);
  EXPECT_DOUBLE_EQ(p.saving, 1 - 3.5e-3 / 5e-3);
  EXPECT_THROW(spd_predict_decode(timing, 5e-4, 4, 5), std::invalid_argument);

  test::ScratchDir dir;
  CommProfile comm;
  comm.world_size = 2;
  comm.alpha = 1e-4;
  comm.beta = 1e-9;
  comm.source = "test";
  comm_profile_write(dir.file("comm.json"), comm);
  EXPECT_DOUBLE_EQ(spd_allreduce_cost(-1, dir.file("comm.json"), "", 32, 2).seconds, 1e-4 + 1e-9 * 128);
  const double rescaled = comm_profile_rescaled(comm, 4).seconds(128);
  EXPECT_DOUBLE_EQ(spd_allreduce_cost(-1, dir.file("comm.json"), "", 32, 4).seconds, rescaled);
  const LinkModel link = link_model_parse("50us,10GB/s");
  EXPECT_DOUBLE_EQ(spd_allreduce_cost(20, "", "50us,10GB/s", 32, 2).seconds,
                   20e-6 + link_all_reduce_seconds(link, 128, 2));
  EXPECT_GT(spd_allreduce_cost(-1, "", "", 32, 2).seconds, 0);  // the planner's estimate
  EXPECT_THROW(spd_allreduce_cost(20, dir.file("comm.json"), "", 32, 2), std::invalid_argument);

  const Trained& t = trained();
  const SpdDecodeTiming measured = spd_time_decode(t.weights, tp_layout_contiguous(t.weights, 2), 2);
  EXPECT_EQ(measured.tokens, 2 * t.weights.max_tokens);
  EXPECT_GT(measured.block_seconds, 0);
  EXPECT_GT(measured.token_seconds, 0);
}

std::vector<char*> argv_of(std::vector<std::string>& args) {
  std::vector<char*> v;
  for (std::string& a : args) v.push_back(a.data());
  return v;
}

TEST(SpdPlanCommand, WritesAPlanThatMatchesItsModelAndRefusesAnother) {
  const Trained& t = trained();
  std::vector<std::string> args = {"--model", t.model_file, "--checkpoint", t.checkpoint_dir, "--tp", "2",
                                   "--data", t.data_file, "--budget", "ppl:2%", "--windows", "16", "--window", "16",
                                   "--allreduce-us", "100", "--link", "50us,10GB/s", "--strategy", "distill",
                                   "--distill-epochs", "2", "--out", t.dir.file("plan.json"), "--quiet"};
  std::vector<char*> argv = argv_of(args);
  const SpdPlanConfig config = spd_plan_parse_args(int(argv.size()), argv.data());
  const SpdPlan made = spd_plan_run(config);
  const SpdPlan plan = spd_plan_read(t.dir.file("plan.json"));
  EXPECT_EQ(plan.dropped_mask(), made.dropped_mask());
  EXPECT_EQ(plan.model, "spd-gpt");
  EXPECT_EQ(plan.model_hash, t.desc.hash);
  EXPECT_EQ(plan.tp_degree, 2);
  EXPECT_EQ(plan.sensitivity.size(), size_t(BLOCKS));
  EXPECT_LE(plan.perplexity_planned, plan.perplexity_tp * 1.02);
  const double allreduce = 100e-6 + link_all_reduce_seconds(link_model_parse("50us,10GB/s"), 32 * 4, 2);
  EXPECT_DOUBLE_EQ(plan.allreduce_seconds, allreduce);
  EXPECT_NEAR(plan.decode_token_seconds_tp - plan.decode_token_seconds_planned,
              double(plan.dropped.size()) * allreduce, 1e-12);
  EXPECT_EQ(plan.weights.empty(), std::all_of(plan.dropped.begin(), plan.dropped.end(), [](const SpdDroppedBlock& d) {
              return d.strategy == SpdStrategy::ZERO_SHOT;
            }));
  if (!plan.weights.empty()) {
    const TransformerWeights w = transformer_weights_read(t.dir.file(plan.weights));
    EXPECT_EQ(w.model_hash, t.desc.hash);
  }
  EXPECT_NO_THROW(spd_plan_check_matches(plan, t.desc.name, t.desc.hash, 2));
  const ModelDesc other = model_desc_parse(test::tiny_gpt_yaml("other-gpt", 3, 32, 4), "other-gpt.yaml");
  try {
    spd_plan_check_matches(plan, other.name, other.hash, 2);
    ADD_FAILURE() << "a plan for spd-gpt was accepted for other-gpt";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'spd-gpt'"), std::string::npos) << what;
    EXPECT_NE(what.find("'other-gpt'"), std::string::npos) << what;
    EXPECT_NE(what.find("qsync-worker spd-plan"), std::string::npos) << what;
  }
  EXPECT_THROW(spd_plan_check_matches(plan, t.desc.name, t.desc.hash, 4), std::invalid_argument);
}

// By default the calibration windows are held out of training (the validation split's odd
// windows); --calibrate-on training is the training split. The model has learnt its training text
// better, so the two calibrations see different perplexities.
TEST(SpdPlanCommand, CalibratesOnHeldOutWindowsUnlessToldTraining) {
  const Trained& t = trained();
  auto plan_with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"--model", t.model_file, "--checkpoint", t.checkpoint_dir, "--tp", "2",
                                     "--data", t.data_file, "--budget", "ppl:2%", "--windows", "8", "--window",
                                     "16", "--allreduce-us", "100", "--strategy", "zero-shot", "--quiet",
                                     "--out", t.dir.file("cal.json")};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv = argv_of(args);
    return spd_plan_run(spd_plan_parse_args(int(argv.size()), argv.data()));
  };
  const SpdPlan held_out = plan_with({});
  const SpdPlan training = plan_with({"--calibrate-on", "training"});

  const CharCorpus corpus = char_corpus_load(t.data_file, 16, 0.1);
  const TpLayout layout = tp_layout_contiguous(t.weights, 2);
  const std::vector<bool> none(BLOCKS, false);
  // The budget windows: 2 * 8 spread over the calibration part, every other one of them.
  const std::vector<int32_t> picked = char_windows_spread(char_heldout_windows(corpus.validation, 16).calibration, 16, 16);
  SpdCalibration expected;
  expected.window = 16;
  expected.stride = 17;
  for (size_t k = 0; k < 16; k += 2)
    expected.tokens.insert(expected.tokens.end(), picked.begin() + std::ptrdiff_t(k * 17),
                           picked.begin() + std::ptrdiff_t((k + 1) * 17));
  EXPECT_EQ(spd_calibration_quality(t.weights, layout, none, expected).positions, 8 * 16);
  EXPECT_NEAR(held_out.perplexity_tp, spd_calibration_quality(t.weights, layout, none, expected).perplexity, 1e-9);
  EXPECT_GT(std::abs(held_out.perplexity_tp - training.perplexity_tp), 1e-6);
}

TEST(SpdPlanCommand, RefusesBadInput) {
  const Trained& t = trained();
  auto run = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"--model", t.model_file, "--checkpoint", t.checkpoint_dir, "--data", t.data_file,
                                     "--out", t.dir.file("bad.json"), "--quiet"};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv = argv_of(args);
    spd_plan_run(spd_plan_parse_args(int(argv.size()), argv.data()));
  };
  auto expect_message = [&](std::vector<std::string> extra, const std::string& piece) {
    try {
      run(extra);
      ADD_FAILURE() << "accepted; expected an error mentioning " << piece;
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find(piece), std::string::npos) << e.what();
    }
  };
  expect_message({"--tp", "3"}, "3");                                     // 3 divides neither 4 heads nor 128
  expect_message({"--budget", "ppl"}, "ppl:1%");                          // the accepted forms
  expect_message({"--strategy", "greedy"}, "head-group");
  expect_message({"--allreduce-us", "5", "--comm-profile", "c.json"}, "not both");
  expect_message({"--window", "17"}, "context");
  expect_message({"--calibrate-on", "validation"}, "held-out");
  expect_message({"--confidence", "1"}, "[0.5, 1)");
  expect_message({"--confidence", "0.3"}, "[0.5, 1)");
  expect_message({"--confidence", "nan"}, "--confidence");
  expect_message({"--windows", "1"}, "--confidence's bound");  // 2 windows: 1 for the budget, 1 for recovery
  expect_message({"--checkpoint", t.dir.file("no-such-ckpt")}, "no-such-ckpt");
  expect_message({"--unknown"}, "--unknown");
  EXPECT_FALSE(std::filesystem::exists(t.dir.file("bad.json")));
}

}  // namespace
}  // namespace qsync
