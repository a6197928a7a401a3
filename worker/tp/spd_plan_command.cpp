// File: worker/tp/spd_plan_command.cpp
// `qsync-worker spd-plan`: flags, then load the model and calibration text, measure the
// sensitivities, classify, select the drop set with recovery, predict the decode latency, write the
// plan (and the distilled weights beside it) and print the report. See spd_plan_command.h.
#include "worker/tp/spd_plan_command.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <stdexcept>

#include "kernels/device_class.h"
#include "planner/cli_args.h"
#include "planner/model_desc.h"
#include "worker/data/char_corpus.h"
#include "worker/tp/spd_latency.h"
#include "worker/tp/spd_sensitivity.h"

namespace qsync {

const char* SPD_PLAN_USAGE =
    "usage: qsync-worker spd-plan --model FILE|NAME --checkpoint C --tp N --data TEXT --out PLAN.json\n"
    "         [--budget ppl:1%|ppl:0.01|acc:0.5%] [--confidence P (0.9; 0.5..0.99, or 0: the measured change)]\n"
    "         [--tau1 X] [--tau2 Y]\n"
    "         [--strategy zero-shot|distill|head-group|auto] [--windows N (200; 0: all)] [--window T]\n"
    "         [--calibrate-on held-out|training]\n"
    "         [--allreduce-us X | --comm-profile FILE] [--link 50us,10GB/s]\n"
    "         [--distill-epochs N] [--distill-lr X] [--threads N] [--device-class C] [--quiet]\n"
    "  Sync-Point Drop plan: block sensitivities on calibration windows of the text (by default the\n"
    "  held-out ones: every other window of its validation split, the rest being what `infer --eval`\n"
    "  scores), the drop set under the budget (recovered by distillation / head grouping as --strategy\n"
    "  allows; a set passes when the upper P bound of its change, paired window by window, is within\n"
    "  it), predicted decode latency.\n";

SpdPlanConfig spd_plan_parse_args(int argc, char** argv) {
  SpdPlanConfig c;
  auto positive = [](const std::string& flag, int64_t v, int64_t min) {
    if (v < min) throw std::invalid_argument(flag + " must be at least " + std::to_string(min) + ", got " + std::to_string(v));
    return v;
  };
  std::map<std::string, std::function<void(const std::string&)>> with_value = {
      {"--model", [&](const std::string& v) { c.model = v; }},
      {"--checkpoint", [&](const std::string& v) { c.checkpoint = v; }},
      {"--tp", [&](const std::string& v) { c.tp = int(positive("--tp", parse_int_flag("--tp", v), 1)); }},
      {"--data", [&](const std::string& v) { c.data = v; }},
      {"--budget", [&](const std::string& v) {
         (void)spd_budget_parse(v);  // refused here, naming the forms
         c.budget = v;
       }},
      {"--confidence", [&](const std::string& v) {
         c.confidence = parse_double_flag("--confidence", v);
         if (!(c.confidence == 0 || (c.confidence >= 0.5 && c.confidence < 1)))
           throw std::invalid_argument("--confidence must be 0 or in [0.5, 1) (0.9: a drop set passes when its change "
                                       "is within the budget with 90% one-sided confidence; 0: the measured change; "
                                       "below 0.5 the bound would sit under the change), got " + v);
       }},
      {"--tau1", [&](const std::string& v) { c.tau1 = parse_double_flag("--tau1", v); }},
      {"--tau2", [&](const std::string& v) { c.tau2 = parse_double_flag("--tau2", v); }},
      {"--strategy", [&](const std::string& v) {
         (void)spd_strategy_limit_from_name(v);
         c.strategy = v;
       }},
      {"--windows", [&](const std::string& v) { c.windows = positive("--windows", parse_int_flag("--windows", v), 0); }},
      {"--window", [&](const std::string& v) { c.window = positive("--window", parse_int_flag("--window", v), 1); }},
      {"--calibrate-on", [&](const std::string& v) {
         if (v != "held-out" && v != "training")
           throw std::invalid_argument("--calibrate-on must be held-out (the validation split's calibration "
                                       "windows) or training (the training split), got '" + v + "'");
         c.calibrate_on = v;
       }},
      {"--allreduce-us", [&](const std::string& v) {
         c.allreduce_us = parse_double_flag("--allreduce-us", v);
         if (!(c.allreduce_us >= 0)) throw std::invalid_argument("--allreduce-us must be >= 0 microseconds, got " + v);
       }},
      {"--comm-profile", [&](const std::string& v) { c.comm_profile = v; }},
      {"--link", [&](const std::string& v) { c.link = v; }},
      {"--distill-epochs", [&](const std::string& v) {
         c.distill_epochs = positive("--distill-epochs", parse_int_flag("--distill-epochs", v), 1);
       }},
      {"--distill-lr", [&](const std::string& v) {
         c.distill_lr = parse_double_flag("--distill-lr", v);
         if (!(c.distill_lr > 0)) throw std::invalid_argument("--distill-lr must be positive, got " + v);
       }},
      {"--out", [&](const std::string& v) { c.out = v; }},
      {"--threads", [&](const std::string& v) { c.threads = int(positive("--threads", parse_int_flag("--threads", v), 1)); }},
      {"--device-class", [&](const std::string& v) { c.device_class = v; }},
  };
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quiet") {
      c.quiet = true;
    } else if (auto it = with_value.find(a); it != with_value.end()) {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value\n" + SPD_PLAN_USAGE);
      it->second(argv[++i]);
    } else {
      throw std::invalid_argument("spd-plan: unknown argument '" + a + "'\n" + SPD_PLAN_USAGE);
    }
  }
  for (const auto& [flag, value] : {std::pair<const char*, const std::string*>{"--model", &c.model},
                                    {"--checkpoint", &c.checkpoint}, {"--data", &c.data}, {"--out", &c.out}})
    if (value->empty()) throw std::invalid_argument(std::string("spd-plan: ") + flag + " is required\n" + SPD_PLAN_USAGE);
  if (c.allreduce_us >= 0 && !c.comm_profile.empty())
    throw std::invalid_argument("spd-plan: give the all-reduce cost once: --allreduce-us or --comm-profile, not both");
  return c;
}

namespace {

// "<plan folder>/<plan stem>.spd-weights.qtw"
std::filesystem::path weights_path_beside(const std::string& plan) {
  const std::filesystem::path p(plan);
  return p.parent_path() / (p.stem().string() + ".spd-weights.qtw");
}

void print_report(const SpdPlan& plan, const SpdSensitivity& s, const SpdSelection& sel, const SpdAllreduceCost& cost,
                  const SpdPlanConfig& c, const std::string& weights_file) {
  std::printf("SPD sensitivity (calibration perplexity: TP %.4f, SPD on every block %.4f; tau1 %.4g, tau2 %.4g)\n",
              s.tp.perplexity, s.all_spd.perplexity, plan.tau1, plan.tau2);
  std::printf("  %5s %12s %12s  %-20s %s\n", "block", "progressive", "alone", "class", "plan");
  for (const SpdBlockSensitivity& b : plan.sensitivity) {
    std::string decision = "sync kept";
    for (const SpdDroppedBlock& d : plan.dropped)
      if (d.block == b.block) decision = std::string("dropped, ") + spd_strategy_name(d.strategy);
    std::printf("  %5lld %12.5f %12.5f  %-20s %s\n", static_cast<long long>(b.block), b.progressive, b.alone,
                spd_block_class_name(b.block_class), decision.c_str());
  }
  char level[32];
  std::snprintf(level, sizeof(level), "%.4g%%", 100.0 * plan.budget.confidence);
  const std::string test = plan.budget.confidence > 0
                               ? "tested on the upper " + std::string(level) + " bound of the change paired by window"
                               : "tested on the measured change";
  std::printf("Selection (--strategy %s; budget %s, %s), in the order tried:\n", c.strategy.c_str(), c.budget.c_str(),
              test.c_str());
  for (const SpdAttempt& a : sel.attempts) {
    const SpdBudgetCheck check = spd_budget_check(plan.budget, s.tp, a.quality);
    const bool ppl = plan.budget.metric == SpdBudgetMetric::PERPLEXITY;
    std::printf("  block %lld %-13s perplexity %.4f accuracy %.4f  %s %+.2f%s (bound %+.2f)  %s",
                static_cast<long long>(a.block), spd_strategy_name(a.strategy), a.quality.perplexity,
                a.quality.accuracy, ppl ? "perplexity change" : "accuracy drop", 100.0 * check.change,
                ppl ? "%" : " points", 100.0 * check.upper,
                a.accepted ? "within budget: dropped" : "over budget");
    if (a.strategy != SpdStrategy::ZERO_SHOT)
      std::printf("  (distillation MSE %.3g -> %.3g held out, %lld steps)", a.distill.heldout_mse_before,
                  a.distill.heldout_mse_after, static_cast<long long>(a.distill.steps));
    if (a.strategy == SpdStrategy::HEAD_GROUPED)
      std::printf("  (head distance %.3g vs contiguous %.3g)", a.within_rank_distance, a.contiguous_distance);
    std::printf("\n");
  }
  std::printf("Calibration (%s windows): perplexity TP %.4f -> planned %.4f (%+.2f%%), "
              "accuracy %.4f -> %.4f (%+.2f points)\n",
              c.calibrate_on.c_str(), plan.perplexity_tp, plan.perplexity_planned,
              100.0 * (plan.perplexity_planned / plan.perplexity_tp - 1.0), plan.accuracy_tp, plan.accuracy_planned,
              100.0 * (plan.accuracy_planned - plan.accuracy_tp));
  std::printf("Predicted decode (TP %d): all-reduce %.1f us [%s], block compute %.1f us per rank;\n", plan.tp_degree,
              plan.allreduce_seconds * 1e6, cost.source.c_str(), plan.block_compute_seconds * 1e6);
  std::printf("  token %.1f us with every sync -> %.1f us planned (%zu of %lld blocks dropped): saving %.1f%%\n",
              plan.decode_token_seconds_tp * 1e6, plan.decode_token_seconds_planned * 1e6, plan.dropped.size(),
              static_cast<long long>(plan.blocks), 100.0 * plan.saving);
  if (!weights_file.empty()) std::printf("Distilled weights: %s\n", weights_file.c_str());
}

// The calibration windows: `text` is windows of cal.window inputs plus their next token, one
// after the other (char_heldout_windows' calibration part, or a training split read that way);
// 2 * cal.windows of them evenly spaced (all with --windows 0), dealt alternately to the budget
// windows (`tokens`) and to the recovery inputs (distillation and head grouping fit those; the
// budget is measured on the others, on text the recovered blocks were not trained on); both keep
// each window's target, stride window + 1. Refused before any evaluation when the budget gets
// fewer than `min_budget_windows` (2 for a confidence bound) or recovery none.
void deal_calibration_windows(const std::vector<int32_t>& text, size_t min_budget_windows, SpdCalibration& cal) {
  const int64_t T = cal.window;
  const size_t stride = size_t(T) + 1;
  const std::vector<int32_t> picked = char_windows_spread(text, T, 2 * cal.windows);
  const size_t n = picked.size() / stride, budget_windows = (n + 1) / 2;
  if (n < 2 || budget_windows < min_budget_windows)
    throw std::invalid_argument("spd-plan: the calibration text gives " + std::to_string(n) + " window(s) of " +
                                std::to_string(stride) + " characters, " + std::to_string(budget_windows) +
                                " for the budget (it needs " + std::to_string(min_budget_windows) +
                                (min_budget_windows > 1 ? " for --confidence's bound" : "") +
                                ") and the rest for recovery (it needs 1); pass more --windows, more text or a "
                                "shorter --window" + (min_budget_windows > 1 ? " (or --confidence 0)" : ""));
  cal.tokens.clear();
  cal.recovery_tokens.clear();
  char_windows_deal(picked, T, cal.tokens, cal.recovery_tokens);
  cal.stride = int64_t(stride);
  cal.windows = 0;  // all of `tokens`
}

}  // namespace

SpdPlan spd_plan_run(const SpdPlanConfig& c) {
  SpdBudget budget = spd_budget_parse(c.budget);
  budget.confidence = c.confidence;
  const SpdStrategyLimit limit = spd_strategy_limit_from_name(c.strategy);
  const DeviceClass& device = c.device_class.empty() ? device_class_fallback(device_class_by_name("cpu-amx"))
                                                     : device_class_by_name(c.device_class);
  device_class_activate(device, c.threads);

  const ModelDesc desc = model_desc_find(c.model);
  const TransformerWeights weights = transformer_weights_load(c.model, c.checkpoint);
  const TpLayout layout = tp_layout_contiguous(weights, c.tp);  // the error for a degree that does not divide
  const int64_t L = int64_t(weights.blocks.size());
  SpdCalibration cal;
  cal.window = c.window > 0 ? c.window : weights.max_tokens;
  if (cal.window > weights.max_tokens)
    throw std::invalid_argument("--window " + std::to_string(cal.window) + " is longer than the model's context (" +
                                std::to_string(weights.max_tokens) + " tokens); pass at most that");
  cal.windows = c.windows;
  const CharCorpus corpus = char_corpus_load(c.data, cal.window, 0.1);
  deal_calibration_windows(c.calibrate_on == "training" ? corpus.train
                                                         : char_heldout_windows(corpus.validation, cal.window).calibration,
                           budget.confidence > 0 ? 2 : 1, cal);

  SpdSensitivity s = spd_measure_sensitivity(weights, layout, cal);
  SpdThresholds t = spd_default_thresholds(budget, s.tp.perplexity, L);
  if (c.tau1) t.tau1 = *c.tau1;
  if (c.tau2) t.tau2 = *c.tau2;
  spd_classify_blocks(s.blocks, t.tau1, t.tau2);
  DistillConfig distill;
  distill.epochs = c.distill_epochs;
  distill.lr = c.distill_lr;
  const SpdSelection sel = spd_select_blocks(weights, layout, cal, s.blocks, budget, s.tp, limit, distill);

  SpdPlan plan;
  plan.model = desc.name;
  plan.model_hash = desc.hash;
  plan.tp_degree = c.tp;
  plan.blocks = L;
  plan.budget = budget;
  plan.tau1 = t.tau1;
  plan.tau2 = t.tau2;
  plan.sensitivity = s.blocks;
  plan.dropped = sel.dropped;
  if (sel.layout_changed) {
    plan.heads_of_rank = sel.layout.heads_of_rank;
    plan.mlp_slice_of_rank = sel.layout.mlp_slice_of_rank;
  }
  plan.perplexity_tp = s.tp.perplexity;
  plan.accuracy_tp = s.tp.accuracy;
  plan.perplexity_planned = sel.planned.perplexity;
  plan.accuracy_planned = sel.planned.accuracy;

  const SpdAllreduceCost cost = spd_allreduce_cost(c.allreduce_us, c.comm_profile, c.link, weights.width, c.tp);
  const SpdDecodePrediction p =
      spd_predict_decode(spd_time_decode(sel.weights, sel.layout), cost.seconds, L, int64_t(sel.dropped.size()));
  plan.allreduce_seconds = p.allreduce_seconds;
  plan.block_compute_seconds = p.block_compute_seconds;
  plan.decode_token_seconds_tp = p.decode_token_seconds_tp;
  plan.decode_token_seconds_planned = p.decode_token_seconds_planned;
  plan.saving = p.saving;

  std::string weights_file;
  if (sel.weights_changed) {
    const std::filesystem::path w = weights_path_beside(c.out);
    transformer_weights_save(sel.weights, w.string());
    plan.weights = w.filename().string();  // relative to the plan's folder
    weights_file = w.string();
  }
  spd_plan_write(plan, c.out);
  if (!c.quiet) {
    print_report(plan, s, sel, cost, c, weights_file);
    std::printf("Plan: %s\n", c.out.c_str());
  }
  return plan;
}

}  // namespace qsync
