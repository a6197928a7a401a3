// File: worker/tp/infer.cpp
// `qsync-worker infer` (worker/tp/infer.h): everything is checked before the rendezvous (model,
// weights, TP degree, plan, drop set, prompt), so a bad input fails fast on every rank with the
// same message; then the world is joined as `train` joins it, and each repeat runs one prefill and
// token-by-token decoding. Every rank computes identical logits (the all-reduce gives every rank
// the same sums), so every rank samples the same token from the same seeded generator.
#include "worker/tp/infer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "kernels/device_class.h"
#include "planner/atomic_file.h"
#include "planner/median.h"
#include "planner/model_desc.h"
#include "planner/spd_plan.h"
#include "worker/data/char_corpus.h"
#include "worker/dist/collectives.h"
#include "worker/dist/link_model.h"
#include "worker/tp/tp_transformer.h"

namespace qsync {
namespace {

RendezvousConfig rendezvous_for(const InferConfig& c) {
  return rendezvous_config_with_overrides(c.rank, c.world_size, c.master_addr, c.master_port,
                                          c.collective_timeout_seconds);
}

// "none" | "all" | "1,3" over `blocks` blocks.
std::vector<bool> parse_drop(const std::string& text, int64_t blocks) {
  std::vector<bool> mask(size_t(blocks), false);
  if (text == "none") return mask;
  if (text == "all") return std::vector<bool>(size_t(blocks), true);
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    size_t used = 0;
    int64_t b = -1;
    try {
      b = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || b < 0 || b >= blocks)
      throw std::invalid_argument("--drop '" + text + "': '" + item + "' is not a block index in 0.." +
                                  std::to_string(blocks - 1) + "; use none, all, or a list such as 1,3");
    mask[size_t(b)] = true;
  }
  return mask;
}

std::vector<int32_t> prompt_tokens(const InferConfig& c, int64_t context) {
  std::string text = c.prompt;
  if (!c.prompt_file.empty()) text = file_read_all(c.prompt_file);
  std::vector<int32_t> tokens = char_encode(text);
  if (c.prompt_tokens > 0) {
    if (int64_t(tokens.size()) < c.prompt_tokens)
      throw std::invalid_argument("--prompt-tokens " + std::to_string(c.prompt_tokens) + ": the prompt has only " +
                                  std::to_string(tokens.size()) + " tokens");
    tokens.resize(size_t(c.prompt_tokens));
  }
  if (tokens.empty())
    throw std::invalid_argument("the prompt is empty: pass --prompt TEXT or --prompt-file FILE (printable text)");
  if (int64_t(tokens.size()) > context)
    throw std::invalid_argument("the prompt has " + std::to_string(tokens.size()) +
                                " tokens, longer than the model's context of " + std::to_string(context) +
                                ": shorten it or pass --prompt-tokens N");
  if (int64_t(tokens.size()) + c.max_new_tokens - 1 > context)
    throw std::invalid_argument("the prompt (" + std::to_string(tokens.size()) + " tokens) plus --max-new-tokens " +
                                std::to_string(c.max_new_tokens) + " pass the model's context of " +
                                std::to_string(context) + " tokens: generate at most " +
                                std::to_string(context - int64_t(tokens.size()) + 1) + " tokens");
  return tokens;
}

int32_t sample(const float* logits, int64_t V, double temperature, std::mt19937_64& rng) {
  int64_t best = 0;
  for (int64_t v = 1; v < V; ++v)
    if (logits[v] > logits[best]) best = v;
  if (temperature <= 0) return int32_t(best);
  std::vector<double> p(static_cast<size_t>(V));
  double sum = 0;
  for (int64_t v = 0; v < V; ++v) sum += (p[size_t(v)] = std::exp((double(logits[v]) - double(logits[best])) / temperature));
  double u = std::uniform_real_distribution<double>(0.0, sum)(rng);
  for (int64_t v = 0; v < V; ++v) {
    u -= p[size_t(v)];
    if (u <= 0) return int32_t(v);
  }
  return int32_t(V - 1);
}

// Everything decided before the rendezvous.
struct Prepared {
  ModelDesc desc;
  TransformerWeights weights;
  TpLayout layout;
  std::vector<bool> dropped;
  std::vector<int32_t> prompt;
  LinkModel link;
};

Prepared prepare(const InferConfig& c, int world) {
  Prepared p;
  p.desc = model_desc_find(c.model);
  const int tp = c.tp > 0 ? c.tp : world;
  if (tp != world)
    throw std::invalid_argument("--tp " + std::to_string(tp) + " must equal WORLD_SIZE " + std::to_string(world) +
                                ": start one `qsync-worker infer` process per TP rank");
  std::optional<SpdPlan> plan;
  if (!c.spd_plan.empty()) {
    plan = spd_plan_read(c.spd_plan);
    spd_plan_check_matches(*plan, p.desc.name, p.desc.hash, tp);
  }
  std::string weights_file = c.weights;
  if (weights_file.empty() && plan && !plan->weights.empty()) {
    const std::filesystem::path w(plan->weights);
    weights_file = w.is_absolute() ? w.string() : (std::filesystem::path(c.spd_plan).parent_path() / w).string();
  }
  if (!weights_file.empty()) {
    if (!std::filesystem::is_regular_file(weights_file))
      throw std::runtime_error("weights file " + weights_file + " does not exist: pass the file `qsync-worker spd-plan` wrote");
    p.weights = transformer_weights_read(weights_file);
    if (p.weights.model_hash != p.desc.hash)
      throw std::invalid_argument("weights file " + weights_file + " belongs to model '" + p.weights.model_name +
                                  "' (hash " + model_hash_string(p.weights.model_hash) + "), not '" + p.desc.name +
                                  "' (hash " + model_hash_string(p.desc.hash) + ")");
  } else {
    p.weights = transformer_weights_load(c.model, c.checkpoint);
  }
  const int64_t L = int64_t(p.weights.blocks.size());
  p.layout = tp_layout_contiguous(p.weights, tp);  // also the error for a TP degree that does not divide
  if (plan && !plan->heads_of_rank.empty()) {
    p.layout.heads_of_rank = plan->heads_of_rank;
    p.layout.mlp_slice_of_rank = plan->mlp_slice_of_rank;
    tp_layout_check(p.weights, p.layout);
  }
  p.dropped.assign(size_t(L), false);
  if (plan) p.dropped = plan->dropped_mask();
  if (!c.drop.empty()) p.dropped = parse_drop(c.drop, L);
  if (int64_t(p.dropped.size()) != L)
    throw std::invalid_argument("the SPD plan covers " + std::to_string(p.dropped.size()) + " blocks, the model has " +
                                std::to_string(L));
  p.prompt = prompt_tokens(c, p.weights.max_tokens);
  p.link = c.link.empty() ? LinkModel{} : link_model_parse(c.link);
  return p;
}

void write_json(const std::string& path, const nlohmann::json& j) { atomic_file_write(path, j.dump(2) + "\n"); }

nlohmann::json summary_json(const InferSummary& s) {
  nlohmann::json j = {{"model", s.model},
                      {"tp_degree", s.tp_degree},
                      {"dropped_blocks", s.dropped_blocks},
                      {"link", s.link},
                      {"collectives", s.collectives},
                      {"prompt_tokens", s.prompt_tokens},
                      {"new_tokens", s.new_tokens},
                      {"repeat", s.repeat},
                      {"prefill_seconds", s.prefill_seconds},
                      {"prefill_allreduce_seconds", s.prefill_allreduce_seconds},
                      {"prefill_allreduce_share", s.prefill_seconds > 0 ? s.prefill_allreduce_seconds / s.prefill_seconds : 0.0},
                      {"prefill_allreduces", s.prefill_allreduces},
                      {"decode_token_seconds", s.decode_token_seconds},
                      {"decode_allreduce_seconds", s.decode_allreduce_seconds},
                      {"decode_allreduce_share",
                       s.decode_token_seconds > 0 ? s.decode_allreduce_seconds / s.decode_token_seconds : 0.0},
                      {"allreduces_per_token", s.allreduces_per_token},
                      {"generated_text", s.generated_text}};
  if (s.evaluated)
    j["eval"] = {{"loss", s.eval_loss}, {"perplexity", s.eval_perplexity}, {"accuracy", s.eval_accuracy},
                 {"positions", s.eval_positions}};
  return j;
}

// c.repeat timed generations from the same seed (prefill, then decode a token at a time), their
// medians into s; the first repeat's tokens and last prompt logits kept.
std::vector<int32_t> generate_timed(TpTransformer& model, Collectives& coll, const Prepared& p, const InferConfig& c,
                                    InferSummary& s) {
  const int64_t V = model.vocab();
  std::vector<double> prefill, prefill_ar, decode, decode_ar;
  std::vector<int32_t> generated;
  for (int64_t rep = 0; rep < c.repeat; ++rep) {
    coll.barrier();  // start every repeat together: the timings measure the work, not the skew of the start
    std::mt19937_64 rng(c.seed);
    std::vector<int32_t> out;
    model.reset(1);
    std::vector<float> logits = model.forward(p.prompt, 1);  // (1, P, V)
    prefill.push_back(model.last_times().total_seconds);
    prefill_ar.push_back(model.last_times().allreduce_seconds);
    s.prefill_allreduces = model.last_times().allreduces;
    if (rep == 0) s.last_logits.assign(logits.end() - V, logits.end());
    const float* last = logits.data() + logits.size() - size_t(V);
    double decode_seconds = 0, decode_allreduce = 0;
    int64_t decode_calls = 0, decode_allreduces = 0;
    for (int64_t i = 0; i < c.max_new_tokens; ++i) {
      const int32_t next = sample(last, V, c.temperature, rng);
      out.push_back(next);
      if (i + 1 == c.max_new_tokens) break;
      logits = model.forward({next}, 1);  // (1, 1, V)
      last = logits.data();
      decode_seconds += model.last_times().total_seconds;
      decode_allreduce += model.last_times().allreduce_seconds;
      decode_allreduces += model.last_times().allreduces;
      ++decode_calls;
    }
    if (decode_calls > 0) {
      decode.push_back(decode_seconds / double(decode_calls));
      decode_ar.push_back(decode_allreduce / double(decode_calls));
      s.allreduces_per_token = double(decode_allreduces) / double(decode_calls);
    }
    if (rep == 0) generated = out;
  }
  s.prefill_seconds = median_of(prefill);
  s.prefill_allreduce_seconds = median_of(prefill_ar);
  s.decode_token_seconds = median_of(decode);
  s.decode_allreduce_seconds = median_of(decode_ar);
  return generated;
}

// --eval: the held-out quality on the evaluation windows of the validation split (spd-plan
// calibrates on the others), spread over all of it.
void evaluate_held_out(TpTransformer& model, const InferConfig& c, InferSummary& s) {
  const int64_t T = model.max_tokens();
  const HeldOutWindows held_out = char_heldout_windows(char_corpus_load(c.eval, T, 0.1).validation, T);
  const TpQuality q = tp_evaluate(model, char_windows_spread(held_out.evaluation, T, c.eval_windows), T, 0,
                                  TP_EVALUATE_BATCH, held_out.stride());
  s.evaluated = true;
  s.eval_loss = q.loss;
  s.eval_perplexity = q.perplexity;
  s.eval_accuracy = q.accuracy;
  s.eval_positions = q.positions;
}

// Rank 0's output: the prompt and generated text, the timing and quality lines, the logits and
// summary files asked for.
void report_inference(const InferSummary& s, const Prepared& p, const InferConfig& c, int64_t blocks) {
  std::fputs((char_decode(p.prompt) + s.generated_text + "\n").c_str(), stdout);
  if (!c.quiet) {
    std::fprintf(stdout, "tp %d, dropped %zu of %lld blocks, link %s: prefill %.3f ms (all-reduce %.0f%%), "
                 "decode %.3f ms/token (all-reduce %.0f%%, %.1f all-reduces/token)\n",
                 s.tp_degree, s.dropped_blocks.size(), (long long)blocks, s.link.c_str(), s.prefill_seconds * 1e3,
                 s.prefill_seconds > 0 ? 100 * s.prefill_allreduce_seconds / s.prefill_seconds : 0.0,
                 s.decode_token_seconds * 1e3,
                 s.decode_token_seconds > 0 ? 100 * s.decode_allreduce_seconds / s.decode_token_seconds : 0.0,
                 s.allreduces_per_token);
    if (s.evaluated)
      std::fprintf(stdout, "held-out: perplexity %.4f, next-char accuracy %.4f over %lld positions\n",
                   s.eval_perplexity, s.eval_accuracy, (long long)s.eval_positions);
  }
  std::fflush(stdout);
  if (!c.logits_out.empty())
    write_json(c.logits_out, {{"model", s.model}, {"tp_degree", s.tp_degree}, {"dropped_blocks", s.dropped_blocks},
                              {"prompt_tokens", s.prompt_tokens}, {"logits", s.last_logits}});
  if (!c.summary_json.empty()) write_json(c.summary_json, summary_json(s));
}

}  // namespace

InferSummary infer_run(const InferConfig& c) {
  const DeviceClass& device = c.device_class.empty() ? device_class_fallback(device_class_by_name("cpu-amx"))
                                                     : device_class_by_name(c.device_class);
  device_class_activate(device, c.threads);
  const RendezvousConfig rc = rendezvous_for(c);
  const Prepared p = prepare(c, rc.world_size);

  World world = world_join(rc, GlooLoopPolicy::kSchedBatch);  // latency-bound: many small all-reduces a token
  std::unique_ptr<Collectives>& coll = world.collectives;
  coll = collectives_with_link(std::move(coll), p.link);
  TpTransformer model = tp_rank(p.weights, p.layout, *coll);
  model.set_dropped(p.dropped);

  InferSummary s;
  s.model = p.desc.name;
  s.tp_degree = p.layout.ranks;
  s.rank = coll->rank();
  for (size_t b = 0; b < p.dropped.size(); ++b)
    if (p.dropped[b]) s.dropped_blocks.push_back(int64_t(b));
  s.link = p.link.describe();
  s.collectives = coll->backend();
  s.prompt_tokens = int64_t(p.prompt.size());
  s.repeat = c.repeat;
  const std::vector<int32_t> generated = generate_timed(model, *coll, p, c, s);
  s.new_tokens = int64_t(generated.size());
  s.generated_text = char_decode(generated);
  if (!c.eval.empty()) evaluate_held_out(model, c, s);
  if (s.rank == 0) report_inference(s, p, c, model.blocks());
  return s;
}

}  // namespace qsync
