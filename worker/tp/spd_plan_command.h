// File: worker/tp/spd_plan_command.h
// `qsync-worker spd-plan`: Sync-Point Drop planning of a trained char-GPT for a TP degree. On the
// calibration text (held-out windows of --data, or its training split) it measures each block's
// sensitivity with the exact N-rank simulation, classifies the blocks, chooses the drop set under
// the budget with the recovery each block needs (worker/tp/spd_sensitivity.h), predicts the decode
// latency (worker/tp/spd_latency.h) and writes the plan (planner/spd_plan.h), with distilled
// weights in a file beside it ("<plan stem>.spd-weights.qtw") when a block was distilled.
//
//   qsync-worker spd-plan --model char-gpt --checkpoint ckpt --tp 2 --data corpus.txt
//       --budget ppl:1% --link 50us,10GB/s --out spd.json
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "planner/spd_plan.h"

namespace qsync {

struct SpdPlanConfig {
  std::string model;        // zoo name or model file
  std::string checkpoint;   // `train` checkpoint file or its directory
  int tp = 2;
  std::string data;         // text file: the calibration text comes from it (calibrate_on)
  std::string budget = "ppl:1%";
  // The budget test's one-sided confidence (SpdBudget::confidence): the selection adds blocks
  // while the test passes, so on the measured change alone it selects favourable sampling error
  // (see windows); 0 tests the measured change.
  double confidence = 0.9;
  std::optional<double> tau1, tau2;  // unset: the default rule (worker/tp/spd_sensitivity.h)
  std::string strategy = "auto";     // zero-shot | distill | head-group | auto
  // Budget windows, as many again for recovery (0: all the text holds). The selection adds blocks
  // while the measured change stays within the budget, so a small sample's noise is selected
  // for: on the fortunes char-GPT, 48 windows chose a set at +0.93% that cost +1.53% on the
  // evaluation windows, 200 one at +0.69% that cost +0.85%.
  int64_t windows = 200;
  int64_t window = 0;       // tokens per window; 0: the model's context
  // held-out: the calibration windows of --data's validation split (char_heldout_windows), text
  // the model never trained on and `infer --eval` never scores; training: its training split.
  std::string calibrate_on = "held-out";
  double allreduce_us = -1; // >= 0: the cost of one decode all-reduce
  std::string comm_profile; // or a communication profile file
  std::string link;         // emulated link added to it ("" = none)
  int64_t distill_epochs = 10;
  double distill_lr = 1e-3;
  std::string out;          // the plan file
  int threads = 1;
  std::string device_class;  // empty: the strongest CPU class available
  bool quiet = false;        // no report on stdout
};

extern const char* SPD_PLAN_USAGE;
// Parses the arguments after `spd-plan`; throws std::invalid_argument naming the bad flag.
SpdPlanConfig spd_plan_parse_args(int argc, char** argv);
// Plans, writes config.out (and the weights file when needed), prints the report, returns the plan.
SpdPlan spd_plan_run(const SpdPlanConfig& config);

}  // namespace qsync
