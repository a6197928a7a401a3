// File: planner/spd_plan.cpp
// Sync-Point Drop plan files: JSON writing (atomic) and reading with checks that name the file and
// the field at fault, budget parsing ("ppl:1%"), class and strategy names, classification by the
// two thresholds, and the check that refuses a plan made for another model or TP degree.
// Format: planner/spd_plan.h.
#include "planner/spd_plan.h"

#include <charconv>
#include <cmath>
#include <set>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "planner/atomic_file.h"
#include "planner/model_desc.h"

namespace qsync {
namespace {

using nlohmann::json;

const char* const SPD_PLAN_FORMAT = "qsync-spd-plan";
constexpr int SPD_PLAN_VERSION = 1;

// Reads fields of one JSON document; every error names the file and the field path ("dropped[1].block").
class FieldReader {
 public:
  explicit FieldReader(std::string path) : path_(std::move(path)) {}

  [[noreturn]] void fail(const std::string& field, const std::string& msg) const {
    throw std::invalid_argument(path_ + ": field '" + field + "' " + msg +
                                "; re-create the plan with `qsync-worker spd-plan` (format: planner/spd_plan.h)");
  }
  const json& member(const json& obj, const std::string& parent, const char* key) const {
    const std::string field = parent.empty() ? key : parent + "." + key;
    if (!obj.is_object()) fail(parent.empty() ? "<top>" : parent, "must be a JSON object");
    auto it = obj.find(key);
    if (it == obj.end()) fail(field, "is missing");
    return *it;
  }
  double number(const json& v, const std::string& field) const {
    if (!v.is_number()) fail(field, "must be a number, got " + v.dump());
    const double x = v.get<double>();
    if (!std::isfinite(x)) fail(field, "must be finite");
    return x;
  }
  double number(const json& obj, const std::string& parent, const char* key) const {
    return number(member(obj, parent, key), parent.empty() ? key : parent + "." + key);
  }
  int64_t integer(const json& v, const std::string& field, int64_t min, int64_t max) const {
    if (!v.is_number_integer()) fail(field, "must be an integer, got " + v.dump());
    const int64_t x = v.get<int64_t>();
    if (x < min || x > max)
      fail(field, "must be in " + std::to_string(min) + ".." + std::to_string(max) + ", got " + std::to_string(x));
    return x;
  }
  std::string string(const json& v, const std::string& field) const {
    if (!v.is_string()) fail(field, "must be a string, got " + v.dump());
    return v.get<std::string>();
  }
  const json& array(const json& v, const std::string& field) const {
    if (!v.is_array()) fail(field, "must be an array, got " + v.dump());
    return v;
  }

 private:
  std::string path_;
};

std::string indexed(const std::string& field, size_t i) { return field + "[" + std::to_string(i) + "]"; }

uint64_t parse_hash(const FieldReader& r, const std::string& text) {
  std::string_view digits = text;
  if (digits.starts_with("0x") || digits.starts_with("0X")) digits.remove_prefix(2);
  uint64_t h = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), h, 16);
  if (digits.empty() || digits.size() > 16 || ec != std::errc() || end != digits.data() + digits.size())
    r.fail("model_hash", "must be the model's hash as hex digits (\"0x...\"), got '" + text + "'");
  return h;
}

SpdBlockClass class_from_name(const FieldReader& r, const std::string& field, const std::string& name) {
  for (SpdBlockClass c : {SpdBlockClass::INSENSITIVE, SpdBlockClass::SENSITIVE, SpdBlockClass::EXTREMELY_SENSITIVE})
    if (name == spd_block_class_name(c)) return c;
  r.fail(field, "must be insensitive, sensitive or extremely-sensitive, got '" + name + "'");
}

json plan_to_json(const SpdPlan& p) {
  json budget = {{"metric", p.budget.metric == SpdBudgetMetric::PERPLEXITY ? "perplexity" : "accuracy"}};
  budget[p.budget.metric == SpdBudgetMetric::PERPLEXITY ? "max_relative_increase" : "max_drop"] = p.budget.limit;
  budget["confidence"] = p.budget.confidence;
  json sensitivity = json::array();
  for (const SpdBlockSensitivity& s : p.sensitivity)
    sensitivity.push_back({{"block", s.block}, {"progressive", s.progressive}, {"alone", s.alone},
                           {"class", spd_block_class_name(s.block_class)}});
  json dropped = json::array();
  for (const SpdDroppedBlock& d : p.dropped)
    dropped.push_back({{"block", d.block}, {"strategy", spd_strategy_name(d.strategy)}});
  json layout = nullptr;
  if (!p.heads_of_rank.empty()) layout = {{"heads_of_rank", p.heads_of_rank}, {"mlp_slice_of_rank", p.mlp_slice_of_rank}};
  return {{"format", SPD_PLAN_FORMAT},
          {"version", SPD_PLAN_VERSION},
          {"model", p.model},
          {"model_hash", "0x" + model_hash_string(p.model_hash)},
          {"tp_degree", p.tp_degree},
          {"blocks", p.blocks},
          {"weights", p.weights.empty() ? json(nullptr) : json(p.weights)},
          {"budget", budget},
          {"thresholds", {{"tau1", p.tau1}, {"tau2", p.tau2}}},
          {"sensitivity", sensitivity},
          {"dropped", dropped},
          {"layout", layout},
          {"calibration",
           {{"perplexity_tp", p.perplexity_tp}, {"perplexity_planned", p.perplexity_planned},
            {"accuracy_tp", p.accuracy_tp}, {"accuracy_planned", p.accuracy_planned}}},
          {"predicted",
           {{"allreduce_seconds", p.allreduce_seconds}, {"block_compute_seconds", p.block_compute_seconds},
            {"decode_token_seconds_tp", p.decode_token_seconds_tp},
            {"decode_token_seconds_planned", p.decode_token_seconds_planned}, {"saving", p.saving}}}};
}

void read_budget(const FieldReader& r, const json& j, SpdPlan& p) {
  const json& b = r.member(j, "", "budget");
  const std::string metric = r.string(r.member(b, "budget", "metric"), "budget.metric");
  if (metric == "perplexity") {
    p.budget.metric = SpdBudgetMetric::PERPLEXITY;
    p.budget.limit = r.number(b, "budget", "max_relative_increase");
    if (p.budget.limit < 0) r.fail("budget.max_relative_increase", "must be >= 0");
  } else if (metric == "accuracy") {
    p.budget.metric = SpdBudgetMetric::ACCURACY;
    p.budget.limit = r.number(b, "budget", "max_drop");
    if (p.budget.limit < 0 || p.budget.limit > 1) r.fail("budget.max_drop", "must be in 0..1");
  } else {
    r.fail("budget.metric", "must be \"perplexity\" or \"accuracy\", got '" + metric + "'");
  }
  if (b.contains("confidence")) {  // plans written before the bound: the measured change (0)
    p.budget.confidence = r.number(b, "budget", "confidence");
    if (!(p.budget.confidence == 0 || (p.budget.confidence >= 0.5 && p.budget.confidence < 1)))
      r.fail("budget.confidence", "must be 0 or in [0.5, 1)");
  }
}

void read_blocks(const FieldReader& r, const json& j, SpdPlan& p) {
  std::set<int64_t> seen;
  const json& sens = r.array(r.member(j, "", "sensitivity"), "sensitivity");
  for (size_t i = 0; i < sens.size(); ++i) {
    const std::string at = indexed("sensitivity", i);
    SpdBlockSensitivity s;
    s.block = r.integer(r.member(sens[i], at, "block"), at + ".block", 0, p.blocks - 1);
    if (!seen.insert(s.block).second) r.fail(at + ".block", "lists block " + std::to_string(s.block) + " twice");
    s.progressive = r.number(sens[i], at, "progressive");
    s.alone = r.number(sens[i], at, "alone");
    s.block_class = class_from_name(r, at + ".class", r.string(r.member(sens[i], at, "class"), at + ".class"));
    p.sensitivity.push_back(s);
  }
  seen.clear();
  const json& dropped = r.array(r.member(j, "", "dropped"), "dropped");
  for (size_t i = 0; i < dropped.size(); ++i) {
    const std::string at = indexed("dropped", i);
    SpdDroppedBlock d;
    d.block = r.integer(r.member(dropped[i], at, "block"), at + ".block", 0, p.blocks - 1);
    if (!seen.insert(d.block).second) r.fail(at + ".block", "drops block " + std::to_string(d.block) + " twice");
    const std::string name = r.string(r.member(dropped[i], at, "strategy"), at + ".strategy");
    try {
      d.strategy = spd_strategy_from_name(name);
    } catch (const std::invalid_argument& e) {
      r.fail(at + ".strategy", e.what());
    }
    p.dropped.push_back(d);
  }
}

void read_layout(const FieldReader& r, const json& j, SpdPlan& p) {
  const json& layout = r.member(j, "", "layout");
  if (layout.is_null()) {
    for (size_t i = 0; i < p.dropped.size(); ++i)
      if (p.dropped[i].strategy == SpdStrategy::HEAD_GROUPED)
        r.fail("layout", "is null but " + indexed("dropped", i) + " is head-grouped; a head-grouped plan needs its layout");
    return;
  }
  const json& heads = r.array(r.member(layout, "layout", "heads_of_rank"), "layout.heads_of_rank");
  const json& slices = r.array(r.member(layout, "layout", "mlp_slice_of_rank"), "layout.mlp_slice_of_rank");
  if (int64_t(heads.size()) != p.blocks || int64_t(slices.size()) != p.blocks)
    r.fail("layout", "must list all " + std::to_string(p.blocks) + " blocks, got " + std::to_string(heads.size()) +
                         " head lists and " + std::to_string(slices.size()) + " MLP slice lists");
  for (int64_t b = 0; b < p.blocks; ++b) {
    const std::string hf = indexed("layout.heads_of_rank", size_t(b));
    const json& ranks = r.array(heads[size_t(b)], hf);
    if (int64_t(ranks.size()) != p.tp_degree)
      r.fail(hf, "must have one head list per rank (" + std::to_string(p.tp_degree) + "), got " + std::to_string(ranks.size()));
    std::set<int> owned;
    std::vector<std::vector<int>> block_heads;
    for (size_t rank = 0; rank < ranks.size(); ++rank) {
      const std::string rf = indexed(hf, rank);
      const json& list = r.array(ranks[rank], rf);
      if (list.size() != r.array(ranks[0], indexed(hf, 0)).size() || list.empty())
        r.fail(rf, "must hold as many heads as every other rank (at least one)");
      std::vector<int> ids;
      for (size_t k = 0; k < list.size(); ++k) {
        const int h = int(r.integer(list[k], indexed(rf, k), 0, 1 << 20));
        if (!owned.insert(h).second) r.fail(indexed(rf, k), "assigns head " + std::to_string(h) + " twice");
        ids.push_back(h);
      }
      block_heads.push_back(ids);
    }
    if (*owned.rbegin() != int(owned.size()) - 1)
      r.fail(hf, "must assign heads 0.." + std::to_string(owned.size() - 1) + " exactly once");
    p.heads_of_rank.push_back(block_heads);
    const std::string sf = indexed("layout.mlp_slice_of_rank", size_t(b));
    const json& sl = r.array(slices[size_t(b)], sf);
    if (int64_t(sl.size()) != p.tp_degree)
      r.fail(sf, "must have one MLP slice per rank (" + std::to_string(p.tp_degree) + "), got " + std::to_string(sl.size()));
    std::set<int> used;
    std::vector<int> block_slices;
    for (size_t rank = 0; rank < sl.size(); ++rank) {
      const int s = int(r.integer(sl[rank], indexed(sf, rank), 0, p.tp_degree - 1));
      if (!used.insert(s).second) r.fail(indexed(sf, rank), "assigns MLP slice " + std::to_string(s) + " twice");
      block_slices.push_back(s);
    }
    p.mlp_slice_of_rank.push_back(block_slices);
  }
}

SpdPlan plan_from_json(const json& j, const std::string& path) {
  FieldReader r(path);
  if (!j.is_object()) r.fail("<top>", "must be a JSON object");
  const std::string format = r.string(r.member(j, "", "format"), "format");
  if (format != SPD_PLAN_FORMAT)
    r.fail("format", "must be \"" + std::string(SPD_PLAN_FORMAT) + "\", got '" + format + "' (is this an SPD plan?)");
  const int64_t version = r.integer(r.member(j, "", "version"), "version", 0, 1 << 30);
  if (version != SPD_PLAN_VERSION)
    r.fail("version", "is " + std::to_string(version) + " but this build reads version " + std::to_string(SPD_PLAN_VERSION));
  SpdPlan p;
  p.model = r.string(r.member(j, "", "model"), "model");
  if (p.model.empty()) r.fail("model", "must name the model");
  p.model_hash = parse_hash(r, r.string(r.member(j, "", "model_hash"), "model_hash"));
  p.tp_degree = int(r.integer(r.member(j, "", "tp_degree"), "tp_degree", 1, 1 << 16));
  p.blocks = r.integer(r.member(j, "", "blocks"), "blocks", 1, 1 << 20);
  const json& weights = r.member(j, "", "weights");
  if (!weights.is_null()) {
    p.weights = r.string(weights, "weights");
    if (p.weights.empty()) r.fail("weights", "must be null or name the distilled weights file");
  }
  read_budget(r, j, p);
  const json& th = r.member(j, "", "thresholds");
  p.tau1 = r.number(th, "thresholds", "tau1");
  p.tau2 = r.number(th, "thresholds", "tau2");
  if (p.tau1 > p.tau2) r.fail("thresholds", "must have tau1 <= tau2, got tau1 " + json(p.tau1).dump() + " > tau2 " + json(p.tau2).dump());
  read_blocks(r, j, p);
  read_layout(r, j, p);
  const json& cal = r.member(j, "", "calibration");
  p.perplexity_tp = r.number(cal, "calibration", "perplexity_tp");
  p.perplexity_planned = r.number(cal, "calibration", "perplexity_planned");
  p.accuracy_tp = r.number(cal, "calibration", "accuracy_tp");
  p.accuracy_planned = r.number(cal, "calibration", "accuracy_planned");
  const json& pred = r.member(j, "", "predicted");
  p.allreduce_seconds = r.number(pred, "predicted", "allreduce_seconds");
  p.block_compute_seconds = r.number(pred, "predicted", "block_compute_seconds");
  p.decode_token_seconds_tp = r.number(pred, "predicted", "decode_token_seconds_tp");
  p.decode_token_seconds_planned = r.number(pred, "predicted", "decode_token_seconds_planned");
  p.saving = r.number(pred, "predicted", "saving");
  return p;
}

}  // namespace

const char* spd_block_class_name(SpdBlockClass c) {
  switch (c) {
    case SpdBlockClass::INSENSITIVE: return "insensitive";
    case SpdBlockClass::SENSITIVE: return "sensitive";
    case SpdBlockClass::EXTREMELY_SENSITIVE: return "extremely-sensitive";
  }
  return "?";
}

const char* spd_strategy_name(SpdStrategy s) {
  switch (s) {
    case SpdStrategy::ZERO_SHOT: return "zero-shot";
    case SpdStrategy::DISTILLED: return "distilled";
    case SpdStrategy::HEAD_GROUPED: return "head-grouped";
  }
  return "?";
}

SpdStrategy spd_strategy_from_name(const std::string& s) {
  for (SpdStrategy x : {SpdStrategy::ZERO_SHOT, SpdStrategy::DISTILLED, SpdStrategy::HEAD_GROUPED})
    if (s == spd_strategy_name(x)) return x;
  throw std::invalid_argument("unknown SPD strategy '" + s + "'; use zero-shot, distilled or head-grouped");
}

SpdBudget spd_budget_parse(const std::string& text) {
  const std::string forms = "write ppl:1% or ppl:0.01 (relative perplexity increase) or acc:0.5% or acc:0.005 "
                            "(next-token accuracy drop)";
  const size_t colon = text.find(':');
  if (colon == std::string::npos) throw std::invalid_argument("budget '" + text + "' has no metric; " + forms);
  const std::string metric = text.substr(0, colon);
  SpdBudget b;
  if (metric == "ppl" || metric == "perplexity") b.metric = SpdBudgetMetric::PERPLEXITY;
  else if (metric == "acc" || metric == "accuracy") b.metric = SpdBudgetMetric::ACCURACY;
  else throw std::invalid_argument("budget '" + text + "': unknown metric '" + metric + "'; " + forms);
  std::string value = text.substr(colon + 1);
  const bool percent = !value.empty() && value.back() == '%';
  if (percent) value.pop_back();
  double x = 0;
  auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), x);
  if (value.empty() || ec != std::errc() || end != value.data() + value.size() || !std::isfinite(x) || x < 0)
    throw std::invalid_argument("budget '" + text + "': '" + text.substr(colon + 1) + "' is not a number >= 0; " + forms);
  b.limit = percent ? x / 100.0 : x;
  if (b.metric == SpdBudgetMetric::ACCURACY && b.limit > 1)
    throw std::invalid_argument("budget '" + text + "': an accuracy drop above 100% means nothing; " + forms);
  return b;
}

SpdBlockClass spd_classify(double sensitivity, double tau1, double tau2) {
  if (sensitivity <= tau1) return SpdBlockClass::INSENSITIVE;
  if (sensitivity <= tau2) return SpdBlockClass::SENSITIVE;
  return SpdBlockClass::EXTREMELY_SENSITIVE;
}

std::vector<bool> SpdPlan::dropped_mask() const {
  std::vector<bool> mask(size_t(std::max<int64_t>(blocks, 0)), false);
  for (const SpdDroppedBlock& d : dropped) {
    if (d.block < 0 || d.block >= blocks)
      throw std::out_of_range("SPD plan drops block " + std::to_string(d.block) + " of a " + std::to_string(blocks) +
                              "-block model");
    mask[size_t(d.block)] = true;
  }
  return mask;
}

void spd_plan_write(const SpdPlan& plan, const std::string& path) {
  atomic_file_write(path, plan_to_json(plan).dump(2) + "\n");
}

SpdPlan spd_plan_read(const std::string& path) {
  std::string text;
  try {
    text = file_read_all(path);
  } catch (const std::runtime_error& e) {
    throw std::invalid_argument(std::string(e.what()) + "; pass the plan written by `qsync-worker spd-plan --out FILE`");
  }
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for a number past double
    throw std::invalid_argument(path + " is not valid JSON (" + e.what() +
                                "); re-create the plan with `qsync-worker spd-plan`");
  }
  return plan_from_json(j, path);
}

void spd_plan_check_matches(const SpdPlan& plan, const std::string& model, uint64_t model_hash, int tp_degree) {
  if (plan.model == model && plan.model_hash == model_hash && plan.tp_degree == tp_degree) return;
  throw std::invalid_argument(
      "the SPD plan was made for model '" + plan.model + "' (hash 0x" + model_hash_string(plan.model_hash) + ") at TP " +
      std::to_string(plan.tp_degree) + ", but this run is model '" + model + "' (hash 0x" +
      model_hash_string(model_hash) + ") at TP " + std::to_string(tp_degree) +
      "; make a matching plan with `qsync-worker spd-plan --model " + model + " --checkpoint CKPT --tp " +
      std::to_string(tp_degree) + " --data TEXT --budget ppl:1% --out PLAN`");
}

}  // namespace qsync
