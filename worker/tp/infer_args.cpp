// File: worker/tp/infer_args.cpp
// The flags of `qsync-worker infer` (worker/tp/infer.h): usage text and parsing.
#include <functional>
#include <map>
#include <stdexcept>

#include "planner/cli_args.h"
#include "worker/tp/infer.h"

namespace qsync {

const char* INFER_USAGE =
    "usage: qsync-worker infer --model FILE|NAME --checkpoint FILE|DIR [--weights FILE] [--tp N]\n"
    "         [--prompt TEXT | --prompt-file FILE] [--prompt-tokens N] [--max-new-tokens N]\n"
    "         [--temperature X (0: greedy)] [--seed S] [--spd-plan FILE] [--drop none|all|LIST (e.g. 1,3)]\n"
    "         [--link none|LATENCY,BANDWIDTH (e.g. 50us,10GB/s)] [--repeat K] [--eval FILE] [--eval-windows N]\n"
    "         [--logits-out FILE] [--summary-json FILE] [--threads N] [--device-class C] [--quiet]\n"
    "         [--rank R] [--world-size N] [--master-addr A] [--master-port P] [--collective-timeout SECONDS]\n"
    "  One process per tensor-parallel rank (--tp must equal WORLD_SIZE); ranks read MASTER_ADDR,\n"
    "  MASTER_PORT, RANK and WORLD_SIZE like train. Rank 0 prints the generated text.\n";

InferConfig infer_parse_args(int argc, char** argv) {
  InferConfig c;
  auto positive = [](const std::string& flag, const std::string& v, int64_t min) {
    const int64_t x = parse_int_flag(flag, v);
    if (x < min) throw std::invalid_argument(flag + " must be at least " + std::to_string(min) + ", got " + v);
    return x;
  };
  std::map<std::string, std::function<void(const std::string&)>> with_value = {
      {"--model", [&](const std::string& v) { c.model = v; }},
      {"--checkpoint", [&](const std::string& v) { c.checkpoint = v; }},
      {"--weights", [&](const std::string& v) { c.weights = v; }},
      {"--tp", [&](const std::string& v) { c.tp = int(positive("--tp", v, 1)); }},
      {"--prompt", [&](const std::string& v) { c.prompt = v; }},
      {"--prompt-file", [&](const std::string& v) { c.prompt_file = v; }},
      {"--prompt-tokens", [&](const std::string& v) { c.prompt_tokens = positive("--prompt-tokens", v, 1); }},
      {"--max-new-tokens", [&](const std::string& v) { c.max_new_tokens = positive("--max-new-tokens", v, 0); }},
      {"--temperature", [&](const std::string& v) {
         c.temperature = parse_double_flag("--temperature", v);
         if (!(c.temperature >= 0)) throw std::invalid_argument("--temperature must be >= 0 (0: greedy), got " + v);
       }},
      {"--seed", [&](const std::string& v) { c.seed = uint64_t(parse_int_flag("--seed", v)); }},
      {"--spd-plan", [&](const std::string& v) { c.spd_plan = v; }},
      {"--drop", [&](const std::string& v) { c.drop = v; }},
      {"--link", [&](const std::string& v) { c.link = v; }},
      {"--repeat", [&](const std::string& v) { c.repeat = positive("--repeat", v, 1); }},
      {"--eval", [&](const std::string& v) { c.eval = v; }},
      {"--eval-windows", [&](const std::string& v) { c.eval_windows = positive("--eval-windows", v, 0); }},
      {"--logits-out", [&](const std::string& v) { c.logits_out = v; }},
      {"--summary-json", [&](const std::string& v) { c.summary_json = v; }},
      {"--threads", [&](const std::string& v) { c.threads = int(positive("--threads", v, 1)); }},
      {"--device-class", [&](const std::string& v) { c.device_class = v; }},
      {"--rank", [&](const std::string& v) { c.rank = int(parse_int_flag("--rank", v)); }},
      {"--world-size", [&](const std::string& v) { c.world_size = int(parse_int_flag("--world-size", v)); }},
      {"--master-addr", [&](const std::string& v) { c.master_addr = v; }},
      {"--master-port", [&](const std::string& v) { c.master_port = int(parse_int_flag("--master-port", v)); }},
      {"--collective-timeout", [&](const std::string& v) {
         c.collective_timeout_seconds = parse_double_flag("--collective-timeout", v);
         if (!(c.collective_timeout_seconds > 0))
           throw std::invalid_argument("--collective-timeout must be positive, got " + v);
       }},
  };
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quiet") {
      c.quiet = true;
    } else if (auto it = with_value.find(a); it != with_value.end()) {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      it->second(argv[++i]);
    } else {
      throw std::invalid_argument("unknown argument '" + a + "'\n" + INFER_USAGE);
    }
  }
  if (c.model.empty()) throw std::invalid_argument(std::string("--model is required\n") + INFER_USAGE);
  if (c.checkpoint.empty() && c.weights.empty())
    throw std::invalid_argument(std::string("--checkpoint is required (or --weights FILE)\n") + INFER_USAGE);
  if (!c.prompt.empty() && !c.prompt_file.empty())
    throw std::invalid_argument("pass either --prompt or --prompt-file, not both");
  return c;
}

}  // namespace qsync
