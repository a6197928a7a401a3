// File: worker/tp/infer.h
// `qsync-worker infer`: tensor-parallel inference of a trained char-GPT, one process per TP rank,
// wired like `train` (MASTER_ADDR / MASTER_PORT / RANK / WORLD_SIZE, or the flags; Gloo
// collectives, optionally behind an emulated slow link). Prefill of the prompt, then greedy or
// temperature decoding; rank 0 prints the text. Optional: an SPD plan (dropped blocks, layout,
// distilled weights) or an explicit --drop set, repeated timing runs (medians), held-out
// perplexity / next-char accuracy, the prefill's last logits and a summary as JSON.
//
//   RANK=0 WORLD_SIZE=2 qsync-worker infer --model char-gpt --checkpoint ckpt --prompt "To be"
//       --max-new-tokens 40 --spd-plan spd.json --link 50us,10GB/s --summary-json s0.json   (and RANK=1 ...)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace qsync {

struct InferConfig {
  std::string model;        // zoo name or model file
  std::string checkpoint;   // `train` checkpoint file or its directory
  std::string weights;      // transformer weights file (distilled); overrides the checkpoint's and the plan's
  int tp = 0;               // 0: WORLD_SIZE
  std::string prompt;       // text, or
  std::string prompt_file;  // a file holding it
  int64_t prompt_tokens = 0;  // > 0: only the first N tokens of the prompt
  int64_t max_new_tokens = 32;
  double temperature = 0;   // 0: greedy
  uint64_t seed = 1;
  std::string spd_plan;     // planner/spd_plan.h file
  std::string drop;         // "" (the plan's set, else none) | "none" | "all" | "1,3"
  std::string link;         // worker/dist/link_model.h spec; "" = none
  int64_t repeat = 1;       // runs of prefill + decode; timings are medians
  std::string eval;         // held-out text file: perplexity / accuracy over the evaluation windows
                            // of its validation split (char_heldout_windows)
  int64_t eval_windows = 64;  // of them, evenly spaced; 0: all
  std::string logits_out;   // rank 0: the prefill's last-position logits (JSON)
  std::string summary_json; // rank 0: the summary (JSON)
  int threads = 1;
  std::string device_class;  // empty: the strongest CPU class available
  bool quiet = false;
  int rank = -1, world_size = -1, master_port = -1;  // -1: from the environment
  std::string master_addr;
  double collective_timeout_seconds = 60;
};

extern const char* INFER_USAGE;
// Parses the arguments after `infer`; throws std::invalid_argument naming the bad flag.
InferConfig infer_parse_args(int argc, char** argv);

struct InferSummary {
  std::string model;
  int tp_degree = 1, rank = 0;
  std::vector<int64_t> dropped_blocks;
  std::string link;             // "none" or the link model
  std::string collectives;      // backend name
  int64_t prompt_tokens = 0, new_tokens = 0, repeat = 0;
  double prefill_seconds = 0;          // median over repeats
  double prefill_allreduce_seconds = 0;
  double decode_token_seconds = 0;     // median over repeats of the mean per decoded token
  double decode_allreduce_seconds = 0; // per token, same run as the median
  int64_t prefill_allreduces = 0;
  double allreduces_per_token = 0;     // decode
  std::string generated_text;
  std::vector<float> last_logits;      // the prefill's last position (V)
  bool evaluated = false;
  double eval_loss = 0, eval_perplexity = 0, eval_accuracy = 0;
  int64_t eval_positions = 0;
};

// Runs one rank. Throws std::invalid_argument (bad flags, TP degree, plan for another model, a
// prompt that does not fit the context) or std::runtime_error (missing checkpoint, a peer failed).
InferSummary infer_run(const InferConfig& config);

}  // namespace qsync
