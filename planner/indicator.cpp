// File: planner/indicator.cpp
// Calibration statistics as JSON (load, atomic write, model check) and the indicators computed
// from them: QSync's bi-directional indicator with its depth weighting, and the weight-error
// baseline. docs/indicator.md derives and explains every formula used here.
#include "planner/indicator.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>

#include "planner/atomic_file.h"

namespace qsync {
namespace {

using json = nlohmann::ordered_json;  // fields stay in the order written

constexpr const char* FORMAT = "qsync-calibration";
constexpr int VERSION = 1;
constexpr const char* FIX = "re-create it with `qsync-worker calibrate --model M --out FILE`";

[[noreturn]] void fail(const std::string& source, const std::string& problem) {
  throw std::runtime_error("calibration stats " + source + ": " + problem + "; " + FIX);
}

const json& field(const json& obj, const char* key, const std::string& source, const std::string& where) {
  const auto it = obj.find(key);
  if (it == obj.end()) fail(source, where + "has no field '" + key + "'");
  return *it;
}

double number_field(const json& obj, const char* key, const std::string& source, const std::string& where) {
  const json& v = field(obj, key, source, where);
  if (!v.is_number()) fail(source, where + "field '" + key + "' is not a number");
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < 0) fail(source, where + "field '" + key + "' must be finite and >= 0");
  return x;
}

int64_t int_field(const json& obj, const char* key, const std::string& source, const std::string& where) {
  const json& v = field(obj, key, source, where);
  if (!v.is_number_integer() || v.get<int64_t>() < 0)
    fail(source, where + "field '" + key + "' must be an integer >= 0");
  return v.get<int64_t>();
}

std::string string_field(const json& obj, const char* key, const std::string& source, const std::string& where) {
  const json& v = field(obj, key, source, where);
  if (!v.is_string()) fail(source, where + "field '" + key + "' is not a string");
  return v.get<std::string>();
}

uint64_t parse_hash(const std::string& text, const std::string& source) {
  bool ok = text.size() == 16;
  for (char c : text) ok = ok && std::isxdigit(static_cast<unsigned char>(c));
  if (!ok) fail(source, "model_hash '" + text + "' is not 16 hex digits");
  return std::stoull(text, nullptr, 16);
}

LayerStats parse_layer(const json& j, size_t index, const std::string& source) {
  if (!j.is_object()) fail(source, "layers[" + std::to_string(index) + "] is not an object");
  LayerStats l;
  l.layer = string_field(j, "layer", source, "layers[" + std::to_string(index) + "] ");
  if (l.layer.empty()) fail(source, "layers[" + std::to_string(index) + "] has an empty name");
  const std::string where = "layer '" + l.layer + "' ";
  l.depth = int(int_field(j, "depth", source, where));
  l.x_scale = number_field(j, "x_scale", source, where);
  l.w_scale = number_field(j, "w_scale", source, where);
  l.x_norm = number_field(j, "x_norm", source, where);
  l.w_norm = number_field(j, "w_norm", source, where);
  l.gw_norm = number_field(j, "gw_norm", source, where);
  l.gw_max = number_field(j, "gw_max", source, where);
  l.x_numel = int_field(j, "x_numel", source, where);
  l.w_numel = int_field(j, "w_numel", source, where);
  l.y_numel = int_field(j, "y_numel", source, where);
  if (l.x_numel == 0 || l.w_numel == 0 || l.y_numel == 0)
    fail(source, where + "has a zero element count (x_numel, w_numel, y_numel must be > 0)");
  l.w_quant_error = number_field(j, "w_quant_error", source, where);
  l.dy_scale = number_field(j, "dy_scale", source, where);
  l.dy_norm = number_field(j, "dy_norm", source, where);
  l.w_error_fp16 = number_field(j, "w_error_fp16", source, where);
  l.w_error_bf16 = number_field(j, "w_error_bf16", source, where);
  l.w_error_fp8 = number_field(j, "w_error_fp8", source, where);
  return l;
}

double square(double x) { return x * x; }

// 2^(-2k) for the mantissa width k of a floating-point format.
double rounding_variance(Precision p) { return std::ldexp(1.0, -2 * precision_traits(p).mantissa_bits); }

void check_options(const IndicatorOptions& o) {
  if (!std::isfinite(o.gamma) || o.gamma < 0)
    throw std::invalid_argument("indicator gamma must be finite and >= 0, got " + std::to_string(o.gamma));
  if (o.exponent_min < 0 || o.exponent_max < o.exponent_min)
    throw std::invalid_argument("indicator exponent clamp [" + std::to_string(o.exponent_min) + ", " +
                                std::to_string(o.exponent_max) + "] is empty or negative: use 0 <= min <= max");
  if (precision_traits(o.int8_backward).kind != NumberKind::FLOATING_POINT || precision_bytes(o.int8_backward) != 2)
    throw std::invalid_argument(std::string("int8's backward format must be bf16 or fp16, got ") +
                                precision_name(o.int8_backward));
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// JSON

std::string calibration_stats_to_json(const CalibrationStats& s) {
  json layers = json::array();
  for (const LayerStats& l : s.layers)
    layers.push_back({{"layer", l.layer},           {"depth", l.depth},
                      {"x_scale", l.x_scale},       {"w_scale", l.w_scale},
                      {"x_norm", l.x_norm},         {"w_norm", l.w_norm},
                      {"gw_norm", l.gw_norm},       {"gw_max", l.gw_max},
                      {"x_numel", l.x_numel},       {"w_numel", l.w_numel},
                      {"y_numel", l.y_numel},       {"w_quant_error", l.w_quant_error},
                      {"dy_scale", l.dy_scale},     {"dy_norm", l.dy_norm},
                      {"w_error_fp16", l.w_error_fp16}, {"w_error_bf16", l.w_error_bf16},
                      {"w_error_fp8", l.w_error_fp8}});
  const json j = {{"format", FORMAT},     {"version", s.version}, {"model", s.model},
                  {"model_hash", model_hash_string(s.model_hash)}, {"steps", s.steps},
                  {"batch", s.batch},     {"layers", layers}};
  return j.dump(2) + "\n";
}

CalibrationStats calibration_stats_parse(const std::string& text, const std::string& source) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for a number past double
    fail(source, std::string("is not valid JSON (") + e.what() + ")");
  }
  if (!j.is_object()) fail(source, "is not a JSON object");
  if (!j.contains("format") || j["format"] != FORMAT) fail(source, std::string("is not a ") + FORMAT + " file");
  const int64_t version = int_field(j, "version", source, "");
  if (version != VERSION)
    fail(source, "has version " + std::to_string(version) + " but this build reads version " + std::to_string(VERSION));
  CalibrationStats s;
  s.version = int(version);
  s.model = string_field(j, "model", source, "");
  s.model_hash = parse_hash(string_field(j, "model_hash", source, ""), source);
  s.steps = int_field(j, "steps", source, "");
  s.batch = int_field(j, "batch", source, "");
  const json& layers = field(j, "layers", source, "");
  if (!layers.is_array() || layers.empty()) fail(source, "'layers' must be a non-empty array");
  std::set<std::string> seen;
  for (size_t i = 0; i < layers.size(); ++i) {
    s.layers.push_back(parse_layer(layers[i], i, source));
    if (!seen.insert(s.layers.back().layer).second) fail(source, "layer '" + s.layers.back().layer + "' appears twice");
  }
  return s;
}

CalibrationStats calibration_stats_load(const std::string& path) {
  return calibration_stats_parse(file_read_all(path), "file " + path);
}

void calibration_stats_write(const std::string& path, const CalibrationStats& s) {
  atomic_file_write(path, calibration_stats_to_json(s));
}

void calibration_stats_check(const CalibrationStats& s, const ModelDesc& m) {
  if (s.model_hash != m.hash)
    throw std::invalid_argument("calibration stats of model '" + s.model + "' (hash " + model_hash_string(s.model_hash) +
                                ") do not match model '" + m.name + "' (hash " + model_hash_string(m.hash) +
                                "): calibrate this model with `qsync-worker calibrate --model " + m.source + "`");
  std::set<std::string> have;
  for (const LayerStats& l : s.layers) have.insert(l.layer);
  for (const LayerDesc* l : model_gemm_layers(m))
    if (!have.count(l->name))
      throw std::invalid_argument("calibration stats have no layer '" + l->name + "' of model '" + m.name +
                                  "': re-run `qsync-worker calibrate`");
}

// ---------------------------------------------------------------------------------------------
// The bi-directional indicator

int indicator_exponent(double value, const IndicatorOptions& o) {
  int e = 0;
  if (std::isfinite(value) && value != 0) (void)std::frexp(value, &e);
  const int magnitude = e < 0 ? -e : e;
  return magnitude < o.exponent_min ? o.exponent_min : magnitude > o.exponent_max ? o.exponent_max : magnitude;
}

IndicatorTerms indicator_terms(const LayerStats& l, LayerPrecision p) { return indicator_terms(l, p, IndicatorOptions{}); }

IndicatorTerms indicator_terms(const LayerStats& l, LayerPrecision p, const IndicatorOptions& o) {
  check_options(o);
  const double dv = double(l.x_numel), dw = double(l.w_numel), dvv = double(l.y_numel);
  const double x = l.x_norm, w = l.w_norm, g = l.gw_norm;
  const double rms_v = dv > 0 ? x / std::sqrt(dv) : 0, rms_w = dw > 0 ? w / std::sqrt(dw) : 0;
  const double rms_dy = dvv > 0 ? l.dy_norm / std::sqrt(dvv) : 0;
  // a_*: how an operand's size enters the float terms; m16: the same for int8's 16-bit gradient.
  double a_v, a_w, a_g, m16;
  if (o.float_form == FloatTermForm::QSYNC) {
    a_v = indicator_exponent(rms_v, o);
    a_w = indicator_exponent(rms_w, o);
    a_g = indicator_exponent(l.gw_max, o);
    m16 = std::ldexp(1.0, 2 * int(a_v));
  } else {
    a_v = square(rms_v);
    a_w = square(rms_w);
    a_g = square(rms_dy);
    m16 = square(rms_dy);
  }
  const double sv2 = square(l.x_scale), sw2 = square(l.w_scale);
  IndicatorTerms t;
  switch (p) {
    case LayerPrecision::FP32:
      break;
    case LayerPrecision::TF32:  // FP32 range, 10-bit mantissa products: fp16's rounding, no range limit
    case LayerPrecision::FP16:
    case LayerPrecision::BF16: {
      const double u = rounding_variance(layer_precision_traits(p).forward);
      t.forward = u * (w * dv * a_v + x * dw * a_w) / 6;
      t.backward = u * (g * dv * a_v + x * dvv * a_g) / 6;
      break;
    }
    case LayerPrecision::INT8:
    case LayerPrecision::INT8_ALL: {
      t.forward = (w * sv2 * dv + x * sw2 * dw) / 6;
      // The output gradient, rounded at 16 bits: relative step 2^-k (k of the backward format).
      // int8-all quantizes it to INT8 instead: relative step dy_scale / rms(dy), which is
      // >= 1/127 > 2^-7 >= 2^-k for real stats (amax >= rms); the max keeps that for any stats.
      double rel_step2 = rounding_variance(o.int8_backward);
      if (p == LayerPrecision::INT8_ALL && rms_dy > 0) rel_step2 = std::max(rel_step2, square(l.dy_scale / rms_dy));
      t.backward = (g * sv2 * dv + x * m16 * rel_step2 * dvv) / 6;
      break;
    }
    case LayerPrecision::FP8: {
      const double u_fwd = rounding_variance(Precision::FP8_E4M3), u_grad = rounding_variance(Precision::FP8_E5M2);
      t.forward = u_fwd * (w * dv * a_v + x * dw * a_w) / 6;
      t.backward = (u_fwd * g * dv * a_v + u_grad * x * dvv * a_g) / 6;
      break;
    }
  }
  return t;
}

double indicator_depth_weighted(const IndicatorTerms& t, int depth, int max_depth, double gamma) {
  if (max_depth == 0) return gamma * t.forward + t.backward;
  return gamma * double(max_depth - depth) * t.forward + double(depth) * t.backward;
}

double weight_error_indicator(const LayerStats& l, LayerPrecision p) {
  double e = 0;
  switch (p) {
    case LayerPrecision::FP32: e = 0; break;
    case LayerPrecision::BF16: e = l.w_error_bf16; break;
    case LayerPrecision::TF32:  // the same 10-bit mantissa as fp16 (and FP32's range: no overflow)
    case LayerPrecision::FP16: e = l.w_error_fp16; break;
    case LayerPrecision::INT8:
    case LayerPrecision::INT8_ALL: e = l.w_quant_error; break;
    case LayerPrecision::FP8: e = l.w_error_fp8; break;
  }
  return std::log2(1.0 + e);
}

IndicatorTable indicator_table(const CalibrationStats& s, IndicatorKind kind, double gamma) {
  IndicatorOptions o;
  o.gamma = gamma;
  return indicator_table(s, kind, o);
}

IndicatorTable indicator_table(const CalibrationStats& s, IndicatorKind kind, const IndicatorOptions& o) {
  check_options(o);
  int max_depth = 0;
  for (const LayerStats& l : s.layers) {
    if (l.depth < 0) throw std::invalid_argument("layer '" + l.layer + "' has a negative depth in the calibration stats");
    max_depth = std::max(max_depth, l.depth);
  }
  IndicatorTable table;
  for (const LayerStats& l : s.layers) {
    if (table.count(l.layer))
      throw std::invalid_argument("layer '" + l.layer + "' appears twice in the calibration stats: re-run calibrate");
    auto& row = table[l.layer];
    for (const LayerPrecisionTraits& t : layer_precision_table())
      row[t.mode] = kind == IndicatorKind::WEIGHT_ERROR
                        ? weight_error_indicator(l, t.mode)
                        : indicator_depth_weighted(indicator_terms(l, t.mode, o), l.depth, max_depth, o.gamma);
  }
  return table;
}

}  // namespace qsync
