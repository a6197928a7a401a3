// File: planner/plan_file.cpp
// Per-rank plan files: parsing and checking against the model (name, hash, GEMM layer names,
// precisions), writing back as YAML, and atomic writes. Format: planner/plan_file.h.
#include "planner/plan_file.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <set>
#include <stdexcept>

#include "planner/atomic_file.h"
#include "planner/model_layers.h"

namespace qsync {
namespace {

const char* const GEMM_LAYERS_ARE = "GEMM layers (linear and conv2d, including attention's qkv and proj)";

[[noreturn]] void fail(const std::string& source, const std::string& msg) {
  throw std::invalid_argument(source + ": " + msg);
}

std::string scalar_or_fail(const YAML::Node& v, const std::string& source, const std::string& what) {
  if (!v.IsScalar() || v.Scalar().empty()) fail(source, what + ", got none");
  return v.Scalar();
}

int64_t integer(const YAML::Node& v, const std::string& source, const char* key, int64_t min) {
  int64_t x = min - 1;
  try {
    if (v.IsScalar()) x = v.as<int64_t>();
  } catch (const YAML::Exception&) {
  }
  if (x < min)
    fail(source, std::string("'") + key + "' must be an integer >= " + std::to_string(min) + ", got " +
                     (v.IsScalar() ? "'" + v.Scalar() + "'" : "none"));
  return x;
}

uint64_t parse_hash(const std::string& text, const std::string& source) {
  std::string_view digits = text;
  if (digits.starts_with("0x") || digits.starts_with("0X")) digits.remove_prefix(2);
  uint64_t h = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), h, 16);
  if (digits.empty() || digits.size() > 16 || ec != std::errc() || end != digits.data() + digits.size())
    fail(source, "model_hash '" + text + "' is not a hex string; write the 16 hex digits of the model's hash "
                 "(as the planner does) or remove model_hash to skip the check");
  return h;
}

std::string number(double x) {
  char buffer[64];
  auto r = std::to_chars(buffer, buffer + sizeof buffer, x);
  return std::string(buffer, r.ptr);
}

// A YAML scalar for `s`: plain when it cannot be misread (no number, bool or null look-alike),
// else double-quoted with escapes.
std::string yaml_scalar(const std::string& s) {
  static const std::set<std::string> reserved = {"true", "false", "yes", "no", "on", "off", "null", "y", "n"};
  std::string lower = s;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  auto word = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
           c == '-' || c == '/';
  };
  bool plain = !s.empty() && (std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_') &&
               std::all_of(s.begin(), s.end(), word) && !reserved.count(lower);
  if (plain) return s;
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') out += '\\', out += char(c);
    else if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20) {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\x%02x", c);
      out += esc;
    } else out += char(c);
  }
  return out + "\"";
}

LayerPrecision precision(const YAML::Node& v, const std::string& source, const std::string& entry) {
  std::string name = scalar_or_fail(v, source, entry + ": the precision must be one of " + layer_precision_names_joined());
  try {
    return layer_precision_from_name(name);
  } catch (const std::invalid_argument& e) {
    fail(source, entry + ": " + e.what() + "; use one of those");
  }
}

const LayerDesc* find_layer(const LayerDesc& l, const std::string& name) {
  if (!l.name.empty() && l.name == name) return &l;
  for (const LayerDesc& c : l.children)
    if (const LayerDesc* hit = find_layer(c, name)) return hit;
  return nullptr;
}

// The error for a plan entry that is not a GEMM layer of `m`.
[[noreturn]] void unknown_layer(const std::string& source, const std::string& layer, const ModelDesc& m) {
  std::vector<std::string> gemm;
  for (const LayerDesc* l : model_gemm_layers(m)) gemm.push_back(l->name);
  std::string few;
  for (size_t i = 0; i < gemm.size() && i < 6; ++i) few += (i ? ", " : "") + gemm[i];
  if (gemm.size() > 6) few += ", ...";
  few += " (" + std::to_string(gemm.size()) + " in all)";
  if (const LayerDesc* l = find_layer(m.root, layer)) {
    std::string instead = l->kind == LayerKind::ATTENTION
                              ? "list '" + layer + ".qkv' and '" + layer + ".proj' instead"
                              : "remove the entry";
    fail(source, "layer '" + layer + "' of model '" + m.name + "' is " + layer_kind_name(l->kind) +
                     ", not a GEMM layer; only " + GEMM_LAYERS_ARE + " take a precision: " + few + "; " + instead);
  }
  std::string guess = model_layers::closest_spelling(layer, gemm);
  fail(source, "layer '" + layer + "' is not a layer of model '" + m.name + "' (" + m.source + ")" +
                   (guess.empty() ? "" : " (did you mean '" + guess + "'?)") + "; plans list " + GEMM_LAYERS_ARE +
                   ": " + few + "; fix the name or remove the entry");
}

void parse_layers(const YAML::Node& layers, const std::string& source, const ModelDesc& m, RankPlan& p) {
  if (!layers || layers.IsNull()) return;
  if (!layers.IsMap()) fail(source, "'layers' must be a mapping of layer name to precision, e.g. {conv1: int8}");
  std::set<std::string> gemm;
  for (const LayerDesc* l : model_gemm_layers(m)) gemm.insert(l->name);
  for (const auto& kv : layers) {
    std::string name = scalar_or_fail(kv.first, source, "layers: a key must be a layer name");
    if (!gemm.count(name)) unknown_layer(source, name, m);
    LayerPrecision value = precision(kv.second, source, "layer '" + name + "'");
    if (!p.layers.emplace(name, value).second)
      fail(source, "layer '" + name + "' is listed twice; keep one entry");
  }
}

}  // namespace

LayerPrecision RankPlan::precision_of(const std::string& layer) const {
  auto it = layers.find(layer);
  return it == layers.end() ? default_precision : it->second;
}

RankPlan plan_uniform(const ModelDesc& m, LayerPrecision p) {
  RankPlan plan;
  plan.model = m.name;
  plan.model_hash = m.hash;
  plan.default_precision = p;
  for (const LayerDesc* l : model_gemm_layers(m)) plan.layers[l->name] = p;
  return plan;
}

RankPlan plan_parse(const std::string& yaml_text, const std::string& source_name, const ModelDesc& m) {
  const std::string& src = source_name;
  YAML::Node doc;
  try {
    doc = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    std::string at = e.mark.is_null() ? "" : " at line " + std::to_string(e.mark.line + 1) + ", column " +
                                                 std::to_string(e.mark.column + 1);
    fail(src, "malformed YAML" + at + ": " + e.msg + "; fix the syntax there");
  }
  if (!doc.IsMap()) fail(src, "a plan file must be a YAML mapping with model, default and layers (see planner/plan_file.h)");
  static const std::vector<std::string> keys = {"model", "model_hash", "rank", "device_class", "local_batch",
                                                "predicted_step_seconds", "default", "layers"};
  for (const auto& kv : doc) {
    std::string key = kv.first.Scalar();
    if (std::find(keys.begin(), keys.end(), key) != keys.end()) continue;
    std::string guess = model_layers::closest_spelling(key, keys);
    fail(src, "unknown key '" + key + "'" + (guess.empty() ? "" : " (did you mean '" + guess + "'?)") +
                  "; a plan has: model, model_hash, rank, device_class, local_batch, predicted_step_seconds, "
                  "default, layers");
  }
  RankPlan p;
  if (!doc["model"]) fail(src, "missing 'model' (the name of the model the plan is for, here '" + m.name + "')");
  p.model = scalar_or_fail(doc["model"], src, "'model' must name the model");
  if (p.model != m.name)
    fail(src, "the plan is for model '" + p.model + "' but the model is '" + m.name + "' (" + m.source +
                  "); use a plan made for '" + m.name + "' or re-run the planner for it");
  if (YAML::Node h = doc["model_hash"]) {
    p.model_hash = parse_hash(scalar_or_fail(h, src, "'model_hash' must be a hex string"), src);
    if (*p.model_hash != m.hash)
      fail(src, "model_hash " + model_hash_string(*p.model_hash) + " does not match model '" + m.name + "' (" +
                    m.source + ", hash " + model_hash_string(m.hash) + "): the model changed since the plan was "
                    "made; re-run the planner, or remove model_hash to skip the check");
  }
  if (YAML::Node r = doc["rank"]) p.rank = int(integer(r, src, "rank", 0));
  if (YAML::Node d = doc["device_class"]) p.device_class = scalar_or_fail(d, src, "'device_class' must be a name");
  if (YAML::Node b = doc["local_batch"]) p.local_batch = integer(b, src, "local_batch", 1);
  if (YAML::Node s = doc["predicted_step_seconds"]) {
    double x = -1;
    try {
      if (s.IsScalar()) x = s.as<double>();
    } catch (const YAML::Exception&) {
    }
    if (!(x >= 0) || !std::isfinite(x))
      fail(src, "'predicted_step_seconds' must be a number of seconds >= 0, got " +
                    (s.IsScalar() ? "'" + s.Scalar() + "'" : std::string("none")));
    p.predicted_step_seconds = x;
  }
  if (YAML::Node d = doc["default"]) p.default_precision = precision(d, src, "default");
  parse_layers(doc["layers"], src, m, p);
  return p;
}

RankPlan plan_file_load(const std::string& path, const ModelDesc& m) {
  std::string text;
  try {
    text = file_read_all(path);
  } catch (const std::runtime_error& e) {
    throw std::invalid_argument(std::string(e.what()) + "; pass the path of a plan file");
  }
  return plan_parse(text, path, m);
}

std::string plan_to_yaml(const RankPlan& p) {
  std::string y = "# QSync rank plan: the precision of each GEMM layer (format: planner/plan_file.h)\n";
  y += "model: " + yaml_scalar(p.model) + "\n";
  if (p.model_hash) y += "model_hash: \"" + model_hash_string(*p.model_hash) + "\"\n";
  if (p.rank) y += "rank: " + std::to_string(*p.rank) + "\n";
  if (!p.device_class.empty()) y += "device_class: " + yaml_scalar(p.device_class) + "\n";
  if (p.local_batch != 0) y += "local_batch: " + std::to_string(p.local_batch) + "\n";
  if (p.predicted_step_seconds != 0) y += "predicted_step_seconds: " + number(p.predicted_step_seconds) + "\n";
  y += "default: " + std::string(layer_precision_name(p.default_precision)) + "\n";
  if (p.layers.empty()) return y + "layers: {}\n";
  y += "layers:\n";
  for (const auto& [name, mode] : p.layers) y += "  " + yaml_scalar(name) + ": " + layer_precision_name(mode) + "\n";
  return y;
}

void plan_file_write(const std::string& path, const RankPlan& p) { atomic_file_write(path, plan_to_yaml(p)); }

}  // namespace qsync
