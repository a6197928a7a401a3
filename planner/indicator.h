// File: planner/indicator.h
// How much each low-precision choice perturbs training: QSync's bi-directional indicator
// (docs/indicator.md has the formulas) and a simple baseline (relative weight quantization
// error). Computed from per-layer statistics of a short FP32 calibration run
// (`qsync-worker calibrate`): INT8 scales of input and weight, norms of input, weight and weight
// gradient, element counts, and FP16 exponents.
//
//   CalibrationStats s = calibration_stats_load("cnn.calib.json");
//   IndicatorTable t = indicator_table(s, IndicatorKind::BIDIRECTIONAL);   // gamma 4
//   t["conv1"][LayerPrecision::INT8]   -> the depth-weighted QSync indicator of conv1 at int8
//
// Orders the bi-directional indicator guarantees for any valid stats, per layer:
//   fp32 = 0 <= fp16 <= bf16 <= fp8,   int8 <= int8-all   (and every value >= 0).
// int8 against fp16/bf16 depends on the stats with QSync's float terms (its INT8 terms are
// absolute, its float terms |exponent|-weighted); with FloatTermForm::ABSOLUTE (and int8's
// backward in bf16, the default) also fp16 <= bf16 <= int8 holds for consistent stats (each
// amax >= its RMS, which calibration guarantees). docs/indicator.md proves these.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "planner/layer_precision.h"
#include "planner/model_desc.h"

namespace qsync {

struct LayerStats {
  std::string layer;       // GEMM layer name
  int depth = 0;           // position in the forward chain (0 = first GEMM layer)
  double x_scale = 0;      // amax(x) / 127, running mean over calibration steps
  double w_scale = 0;      // amax(w) / 127
  double x_norm = 0;       // ||x||_F (not squared)
  double w_norm = 0;       // ||w||_F
  double gw_norm = 0;      // ||dL/dw||_F
  double gw_max = 0;       // max |dL/dw|
  int64_t x_numel = 0, w_numel = 0, y_numel = 0;  // elements of input, weight, output (per step)
  double w_quant_error = 0;  // sum |qdq(w) - w| / sum |w| at INT8 per channel (the baseline)
  // Added for int8-all and the baseline of the float formats (0 when unknown).
  double dy_scale = 0;       // amax(dL/dy) / 127: the output gradient's per-tensor INT8 scale
  double dy_norm = 0;        // ||dL/dy||_F (dy has y_numel elements)
  double w_error_fp16 = 0;   // sum |fp16(w) - w| / sum |w|
  double w_error_bf16 = 0;   // sum |bf16(w) - w| / sum |w|
  double w_error_fp8 = 0;    // sum |qdq(w) - w| / sum |w| at E4M3, per-tensor scale amax / 448
};

struct CalibrationStats {
  int version = 1;
  std::string model;
  uint64_t model_hash = 0;
  int64_t steps = 0, batch = 0;
  std::vector<LayerStats> layers;  // forward order
};

// JSON (docs/indicator.md). load throws std::runtime_error naming the file and the problem
// (unreadable, not JSON, other version, missing or negative field) and the fix.
CalibrationStats calibration_stats_load(const std::string& path);
void calibration_stats_write(const std::string& path, const CalibrationStats& s);  // atomic
// The stats as calibration_stats_write writes them, and their parser (`source` names the
// origin in errors).
std::string calibration_stats_to_json(const CalibrationStats& s);
CalibrationStats calibration_stats_parse(const std::string& json_text, const std::string& source);
// Throws std::invalid_argument when `s` was not calibrated on `m` (other hash, or a GEMM layer
// of `m` has no stats).
void calibration_stats_check(const CalibrationStats& s, const ModelDesc& m);

enum class IndicatorKind : uint8_t { BIDIRECTIONAL, WEIGHT_ERROR };

// indicator[layer][precision]: >= 0, 0 for fp32; larger = more harmful.
using IndicatorTable = std::map<std::string, std::map<LayerPrecision, double>>;

IndicatorTable indicator_table(const CalibrationStats& s, IndicatorKind kind, double gamma = 4.0);

// How the floating-point terms (fp16, bf16, fp8, and int8's 16-bit backward) measure an operand.
enum class FloatTermForm : uint8_t {
  QSYNC,     // QSync's: 2^(-2k) times the operand's clamped |exponent| e (int8's 16-bit term: 2^(2 e_v))
  ABSOLUTE,  // 2^(-2k) times the operand's mean square: absolute error, in the INT8 terms' units
};

// The knobs of the bi-directional indicator (the defaults are what the overloads without options
// use).
struct IndicatorOptions {
  double gamma = 4.0;  // forward weight against backward weight in the depth weighting
  // The 16-bit format of int8's backward GEMMs (its mantissa bits are QSync's k there). BF16,
  // the coarser one, unless the planner knows the device runs FP16 (worker: ctx.sixteen_bit).
  Precision int8_backward = Precision::BF16;
  // |exponent| clamp of e_v, e_w, e_g. QSync caps at 5; the floor of 1 (QSync: 0) keeps a
  // float term from vanishing when an RMS lies in [0.5, 1), where frexp's exponent is 0.
  int exponent_min = 1, exponent_max = 5;
  FloatTermForm float_form = FloatTermForm::QSYNC;
};
IndicatorTable indicator_table(const CalibrationStats& s, IndicatorKind kind, const IndicatorOptions& options);

// The bi-directional indicator's forward and backward terms of one layer (before the depth
// weighting), exposed for tests and explanations.
struct IndicatorTerms {
  double forward = 0, backward = 0;
};
IndicatorTerms indicator_terms(const LayerStats& l, LayerPrecision p);
IndicatorTerms indicator_terms(const LayerStats& l, LayerPrecision p, const IndicatorOptions& options);

// omega = gamma (L - d) forward + d backward (L = max_depth); when L is 0 (one GEMM layer),
// gamma forward + backward.
double indicator_depth_weighted(const IndicatorTerms& t, int depth, int max_depth, double gamma);
// e = clamp(|frexp exponent of value|, exponent_min, exponent_max).
int indicator_exponent(double value, const IndicatorOptions& options);
// The baseline of one layer: log2(1 + relative weight error at p) (QSync's WVAR form).
double weight_error_indicator(const LayerStats& l, LayerPrecision p);

}  // namespace qsync
