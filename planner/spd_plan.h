// File: planner/spd_plan.h
// Sync-Point Drop plans: which transformer blocks of a tensor-parallel model drop their attention
// all-reduce, how each dropped block is recovered, and what the plan predicts. The format is the
// planner's (like plan files); `qsync-worker spd-plan` measures the sensitivities and writes it,
// `qsync-worker infer --spd-plan FILE` reads it.
//
// Block classes follow the SPD paper: sorted by sensitivity s (perplexity change when the block
// joins the SPD set), s <= tau1 insensitive (zero-shot), tau1 < s <= tau2 sensitive (zero-shot +
// block-to-block distillation), s > tau2 extremely sensitive (head grouping + distillation).
//
// File (JSON, written atomically):
//   {"format": "qsync-spd-plan", "version": 1, "model": "char-gpt", "model_hash": "0x…",
//    "tp_degree": 2, "blocks": 4, "weights": "spd-weights.qtw" | null,
//    "budget": {"metric": "perplexity" | "accuracy", "max_relative_increase" | "max_drop": 0.01},
//    "thresholds": {"tau1": …, "tau2": …},
//    "sensitivity": [{"block": 3, "progressive": …, "alone": …, "class": "insensitive"}, …],
//    "dropped": [{"block": 3, "strategy": "zero-shot" | "distilled" | "head-grouped"}, …],
//    "layout": {"heads_of_rank": [[[0,1],[2,3]], …], "mlp_slice_of_rank": [[0,1], …]} | null,
//    "calibration": {"perplexity_tp": …, "perplexity_planned": …, "accuracy_tp": …, "accuracy_planned": …},
//    "predicted": {"allreduce_seconds": …, "block_compute_seconds": …, "decode_token_seconds_tp": …,
//                  "decode_token_seconds_planned": …, "saving": …}}
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace qsync {

enum class SpdBlockClass { INSENSITIVE, SENSITIVE, EXTREMELY_SENSITIVE };
enum class SpdStrategy { ZERO_SHOT, DISTILLED, HEAD_GROUPED };
enum class SpdBudgetMetric { PERPLEXITY, ACCURACY };

const char* spd_block_class_name(SpdBlockClass c);       // "insensitive", "sensitive", "extremely-sensitive"
const char* spd_strategy_name(SpdStrategy s);            // "zero-shot", "distilled", "head-grouped"
SpdStrategy spd_strategy_from_name(const std::string& s);  // throws listing the names

struct SpdBudget {
  SpdBudgetMetric metric = SpdBudgetMetric::PERPLEXITY;
  double limit = 0.01;  // PERPLEXITY: max relative increase (0.01 = +1%); ACCURACY: max absolute drop (0.01 = 1 point)
  // One-sided confidence of the budget test, 0 or in [0.5, 1): a drop set passes when the upper
  // `confidence` bound of its change, paired window by window against TP, is within the limit;
  // 0: the measured change itself (worker/tp/spd_sensitivity.h).
  double confidence = 0;
};
// "ppl:1%", "ppl:0.01", "acc:0.5%"; throws naming the accepted forms.
SpdBudget spd_budget_parse(const std::string& text);

struct SpdBlockSensitivity {
  int64_t block = 0;
  double progressive = 0;  // PPL(SPD on block..L-1) - PPL(SPD on block+1..L-1)
  double alone = 0;        // PPL(SPD on this block only) - PPL(TP)
  SpdBlockClass block_class = SpdBlockClass::INSENSITIVE;
};

// Classifies by thresholds (s <= tau1, <= tau2, above).
SpdBlockClass spd_classify(double sensitivity, double tau1, double tau2);

struct SpdDroppedBlock {
  int64_t block = 0;
  SpdStrategy strategy = SpdStrategy::ZERO_SHOT;
};

struct SpdPlan {
  std::string model;
  uint64_t model_hash = 0;
  int tp_degree = 1;
  int64_t blocks = 0;
  std::string weights;  // distilled weights file, relative to the plan's folder or absolute; "" = the checkpoint's
  SpdBudget budget;
  double tau1 = 0, tau2 = 0;
  std::vector<SpdBlockSensitivity> sensitivity;
  std::vector<SpdDroppedBlock> dropped;
  // Head grouping (empty = contiguous): [block][rank] -> heads, [block][rank] -> MLP slice.
  std::vector<std::vector<std::vector<int>>> heads_of_rank;
  std::vector<std::vector<int>> mlp_slice_of_rank;
  double perplexity_tp = 0, perplexity_planned = 0, accuracy_tp = 0, accuracy_planned = 0;
  double allreduce_seconds = 0, block_compute_seconds = 0;
  double decode_token_seconds_tp = 0, decode_token_seconds_planned = 0;
  double saving = 0;  // 1 - planned / tp

  std::vector<bool> dropped_mask() const;  // size `blocks`
};

// Atomic write (planner/atomic_file.h). Read throws naming the path and the field for a missing
// file, another format or version, or inconsistent content (block index out of range, dropped twice).
void spd_plan_write(const SpdPlan& plan, const std::string& path);
SpdPlan spd_plan_read(const std::string& path);
// Throws std::invalid_argument when the plan was made for another model, hash or TP degree, with
// both sides named and the command that makes a matching plan.
void spd_plan_check_matches(const SpdPlan& plan, const std::string& model, uint64_t model_hash, int tp_degree);

}  // namespace qsync
