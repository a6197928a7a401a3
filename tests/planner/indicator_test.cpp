// File: tests/planner/indicator_test.cpp
// Unit tests for planner/indicator: hand-computed terms of a tiny layer (int8, int8-all, fp16,
// bf16, fp8, both float-term forms), the orders the indicator guarantees over random stats,
// depth weighting with gamma, the weight-error baseline, calibration-stats JSON round trips and
// the errors for bad files.
#include "planner/indicator.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <random>

#include "planner/atomic_file.h"
#include "tests/planner/planner_test_support.h"

namespace qsync {
namespace {

using qsync::testing::expect_error;
using qsync::testing::ScratchDir;
using P = LayerPrecision;

// A layer whose terms are easy by hand:
//   Dv = 16, ||X|| = 4 -> rms 1 = 0.5 * 2^1, e_v = 1;  Dw = 16, ||W|| = 0.5 -> rms 1/8, e_w = 2
//   max|dW| = 0.01 = 0.64 * 2^-6 -> e_g = 6, capped to 5;  Dvv = 4, ||dy|| = 0.02 -> rms(dy) 0.01
//   Sv = 0.5, Sw = 0.25, ||dW|| = 3, dy_scale = 0.005
LayerStats tiny_layer() {
  LayerStats l;
  l.layer = "fc";
  l.x_scale = 0.5;
  l.w_scale = 0.25;
  l.x_norm = 4;
  l.w_norm = 0.5;
  l.gw_norm = 3;
  l.gw_max = 0.01;
  l.x_numel = 16;
  l.w_numel = 16;
  l.y_numel = 4;
  l.dy_norm = 0.02;
  l.dy_scale = 0.005;
  l.w_quant_error = 0.01;
  l.w_error_fp16 = 0.0002;
  l.w_error_bf16 = 0.002;
  l.w_error_fp8 = 0.03;
  return l;
}

constexpr double REL = 1e-12;
#define EXPECT_REL(a, b) EXPECT_NEAR((a), (b), REL * std::fabs(b))

TEST(Indicator, ExponentIsClampedMagnitudeOfFrexp) {
  const IndicatorOptions o;
  EXPECT_EQ(indicator_exponent(1.0, o), 1);    // 0.5 * 2^1
  EXPECT_EQ(indicator_exponent(0.75, o), 1);   // exponent 0, raised to the floor 1
  EXPECT_EQ(indicator_exponent(0.125, o), 2);  // 0.5 * 2^-2
  EXPECT_EQ(indicator_exponent(0.01, o), 5);   // 2^-6, capped
  EXPECT_EQ(indicator_exponent(1e6, o), 5);
  EXPECT_EQ(indicator_exponent(0.0, o), 1);
  IndicatorOptions qsync_exact;
  qsync_exact.exponent_min = 0;
  EXPECT_EQ(indicator_exponent(0.75, qsync_exact), 0);
}

TEST(Indicator, Int8TermsByHand) {
  const LayerStats l = tiny_layer();
  // fwd = (1/6)(||W|| Sv^2 Dv + ||X|| Sw^2 Dw) = (0.5*0.25*16 + 4*0.0625*16)/6 = (2 + 4)/6
  // bwd = (1/6)(||dW|| Sv^2 Dv + ||X|| 2^(2 e_v) 2^-2k Dvv), k = 7 (bf16) = (12 + 4*4*2^-14*4)/6
  const IndicatorTerms t = indicator_terms(l, P::INT8);
  EXPECT_REL(t.forward, 1.0);
  EXPECT_REL(t.backward, (12 + std::ldexp(1.0, -8)) / 6);
  IndicatorOptions fp16_backward;
  fp16_backward.int8_backward = Precision::FP16;  // k = 10
  EXPECT_REL(indicator_terms(l, P::INT8, fp16_backward).backward, (12 + std::ldexp(1.0, -14)) / 6);
  // int8-all: the gradient's relative INT8 step dy_scale / rms(dy) = 0.5 replaces 2^-k:
  // (12 + 4 * 2^2 * 0.25 * 4) / 6
  const IndicatorTerms all = indicator_terms(l, P::INT8_ALL);
  EXPECT_REL(all.forward, 1.0);
  EXPECT_REL(all.backward, 28.0 / 6);
  EXPECT_EQ(indicator_terms(l, P::FP32).forward, 0.0);
  EXPECT_EQ(indicator_terms(l, P::FP32).backward, 0.0);
}

TEST(Indicator, FloatTermsByHand) {
  const LayerStats l = tiny_layer();
  // fp16 (k = 10): fwd = 2^-20 (||W|| Dv e_v + ||X|| Dw e_w)/6 = 2^-20 (0.5*16*1 + 4*16*2)/6
  //                bwd = 2^-20 (||dW|| Dv e_v + ||X|| Dvv e_g)/6 = 2^-20 (3*16*1 + 4*4*5)/6
  const IndicatorTerms f16 = indicator_terms(l, P::FP16);
  EXPECT_REL(f16.forward, std::ldexp(136.0, -20) / 6);
  EXPECT_REL(f16.backward, std::ldexp(128.0, -20) / 6);
  // bf16 (k = 7): 2^6 = 64 times fp16
  const IndicatorTerms b16 = indicator_terms(l, P::BF16);
  EXPECT_REL(b16.forward, std::ldexp(136.0, -14) / 6);
  EXPECT_REL(b16.backward, std::ldexp(128.0, -14) / 6);
  // fp8: E4M3 (k = 3) operands, E5M2 (k = 2) gradient
  const IndicatorTerms f8 = indicator_terms(l, P::FP8);
  EXPECT_REL(f8.forward, std::ldexp(136.0, -6) / 6);
  EXPECT_REL(f8.backward, (std::ldexp(48.0, -6) + std::ldexp(80.0, -4)) / 6);
}

TEST(Indicator, AbsoluteFloatTermsByHand) {
  const LayerStats l = tiny_layer();
  IndicatorOptions o;
  o.float_form = FloatTermForm::ABSOLUTE;
  // rms_v^2 = 1, rms_w^2 = 1/64, rms(dy)^2 = 1e-4
  const IndicatorTerms b16 = indicator_terms(l, P::BF16, o);
  EXPECT_REL(b16.forward, std::ldexp(0.5 * 16 + 4 * 16 / 64.0, -14) / 6);
  EXPECT_REL(b16.backward, std::ldexp(3 * 16 + 4 * 4 * 1e-4, -14) / 6);
  EXPECT_REL(indicator_terms(l, P::INT8, o).backward, (12 + std::ldexp(4 * 1e-4 * 4, -14)) / 6);
  // int8-all: exactly ||X|| dy_scale^2 Dvv for the gradient
  EXPECT_REL(indicator_terms(l, P::INT8_ALL, o).backward, (12 + 4 * 0.005 * 0.005 * 4) / 6);
}

// Random stats, log-uniform over many decades; `consistent` keeps every amax >= its RMS (as
// calibration guarantees).
LayerStats random_layer(std::mt19937_64& rng, bool consistent) {
  std::uniform_real_distribution<double> decade(-8, 3), factor(0, 2.5);
  std::uniform_int_distribution<int64_t> count(1, 1 << 20);
  auto lu = [&] { return std::pow(10.0, decade(rng)); };
  LayerStats l;
  l.layer = "l";
  l.x_numel = count(rng);
  l.w_numel = count(rng);
  l.y_numel = count(rng);
  l.x_norm = lu();
  l.w_norm = lu();
  l.gw_norm = lu();
  l.gw_max = lu();
  l.dy_norm = lu();
  auto scale_for = [&](double norm, int64_t n) {
    return consistent ? norm / std::sqrt(double(n)) * std::pow(10.0, factor(rng)) / 127 : lu();
  };
  l.x_scale = scale_for(l.x_norm, l.x_numel);
  l.w_scale = scale_for(l.w_norm, l.w_numel);
  l.dy_scale = scale_for(l.dy_norm, l.y_numel);
  return l;
}

double total(const IndicatorTerms& t) { return t.forward + t.backward; }

// Checked term by term (forward and backward), so any non-negative depth weighting keeps them.
// `slack`: relative rounding allowance where the two sides share a term computed in another order.
void expect_le(const LayerStats& l, P lo, P hi, const IndicatorOptions& o, double slack = 0) {
  const IndicatorTerms a = indicator_terms(l, lo, o), b = indicator_terms(l, hi, o);
  EXPECT_LE(a.forward, b.forward * (1 + slack)) << layer_precision_name(lo) << " vs " << layer_precision_name(hi);
  EXPECT_LE(a.backward, b.backward * (1 + slack)) << layer_precision_name(lo) << " vs " << layer_precision_name(hi);
}

TEST(Indicator, GuaranteedOrdersHoldForAnyStats) {
  std::mt19937_64 rng(7);
  for (FloatTermForm form : {FloatTermForm::QSYNC, FloatTermForm::ABSOLUTE})
    for (Precision b : {Precision::BF16, Precision::FP16})
      for (int i = 0; i < 2000; ++i) {
        IndicatorOptions o;
        o.float_form = form;
        o.int8_backward = b;
        const LayerStats l = random_layer(rng, false);
        EXPECT_EQ(total(indicator_terms(l, P::FP32, o)), 0.0);
        for (const auto& t : layer_precision_table()) {
          EXPECT_GE(indicator_terms(l, t.mode, o).forward, 0.0);
          EXPECT_GE(indicator_terms(l, t.mode, o).backward, 0.0);
        }
        expect_le(l, P::FP32, P::FP16, o);
        expect_le(l, P::FP16, P::BF16, o);
        expect_le(l, P::BF16, P::FP8, o);
        expect_le(l, P::INT8, P::INT8_ALL, o);
        if (::testing::Test::HasFailure()) return;
      }
}

TEST(Indicator, AbsoluteFormAlsoOrdersInt8AboveSixteenBitForConsistentStats) {
  std::mt19937_64 rng(11);
  IndicatorOptions o;
  o.float_form = FloatTermForm::ABSOLUTE;
  IndicatorOptions o16 = o;
  o16.int8_backward = Precision::FP16;
  for (int i = 0; i < 2000 && !::testing::Test::HasFailure(); ++i) {
    const LayerStats l = random_layer(rng, true);
    expect_le(l, P::BF16, P::INT8, o, 1e-12);     // int8's backward in bf16: above bf16 (and fp16)
    expect_le(l, P::FP16, P::INT8, o16, 1e-12);  // int8's backward in fp16: above fp16
  }
}

TEST(Indicator, QsyncFormDoesNotOrderInt8AboveBf16ForSmallWeights) {
  // Documented limitation: QSync's float terms weight an operand by its |exponent|, which grows
  // as the values shrink, while the INT8 terms shrink with the scale. A layer with tiny weights
  // (rms 2^-10, e_w capped to 5) and a modest input scale has bf16 above int8.
  LayerStats l = tiny_layer();
  l.w_norm = 4 * std::ldexp(1.0, -10);  // Dw = 16: rms 2^-10
  l.w_scale = std::ldexp(1.0, -9) / 127;
  l.x_scale = 1.0 / 127;
  EXPECT_GT(indicator_terms(l, P::BF16).forward, indicator_terms(l, P::INT8).forward);
  IndicatorOptions o;
  o.float_form = FloatTermForm::ABSOLUTE;
  EXPECT_LT(indicator_terms(l, P::BF16, o).forward, indicator_terms(l, P::INT8, o).forward);
}

CalibrationStats three_layers() {
  CalibrationStats s;
  s.model = "m";
  s.model_hash = 0x0123456789abcdefull;
  s.steps = 10;
  s.batch = 32;
  for (int d = 0; d < 3; ++d) {
    LayerStats l = tiny_layer();
    l.layer = "fc" + std::to_string(d + 1);
    l.depth = d;
    l.x_norm *= double(d + 1);
    s.layers.push_back(l);
  }
  return s;
}

TEST(Indicator, DepthWeightingWithGamma) {
  const CalibrationStats s = three_layers();  // depths 0, 1, 2: L = 2
  for (double gamma : {4.0, 1.0, 0.0}) {
    const IndicatorTable t = indicator_table(s, IndicatorKind::BIDIRECTIONAL, gamma);
    ASSERT_EQ(t.size(), 3u);
    for (const LayerStats& l : s.layers)
      for (P p : {P::INT8, P::FP16, P::INT8_ALL}) {
        const IndicatorTerms terms = indicator_terms(l, p);
        EXPECT_REL(t.at(l.layer).at(p), gamma * (2 - l.depth) * terms.forward + l.depth * terms.backward);
      }
    EXPECT_EQ(t.at("fc2").at(P::FP32), 0.0);
  }
  // The first layer counts only its forward, the last only its backward.
  const IndicatorTerms first = indicator_terms(s.layers[0], P::INT8), last = indicator_terms(s.layers[2], P::INT8);
  const IndicatorTable t = indicator_table(s, IndicatorKind::BIDIRECTIONAL);
  EXPECT_REL(t.at("fc1").at(P::INT8), 4 * 2 * first.forward);
  EXPECT_REL(t.at("fc3").at(P::INT8), 2 * last.backward);
  // One GEMM layer (L = 0): gamma fwd + bwd, so its precisions still rank.
  CalibrationStats one = s;
  one.layers.resize(1);
  EXPECT_REL(indicator_table(one, IndicatorKind::BIDIRECTIONAL).at("fc1").at(P::INT8), 4 * first.forward + first.backward);
  expect_error<std::invalid_argument>([&] { indicator_table(s, IndicatorKind::BIDIRECTIONAL, -1.0); }, {"gamma"});
}

TEST(Indicator, WeightErrorBaselineIsLog2OfOnePlusRelativeError) {
  const CalibrationStats s = three_layers();
  const IndicatorTable t = indicator_table(s, IndicatorKind::WEIGHT_ERROR);
  const auto& row = t.at("fc1");
  EXPECT_EQ(row.at(P::FP32), 0.0);
  EXPECT_REL(row.at(P::INT8), std::log2(1.01));
  EXPECT_EQ(row.at(P::INT8_ALL), row.at(P::INT8));  // the same weight quantization
  EXPECT_REL(row.at(P::FP16), std::log2(1.0002));
  EXPECT_REL(row.at(P::BF16), std::log2(1.002));
  EXPECT_REL(row.at(P::FP8), std::log2(1.03));
}

TEST(CalibrationStats, JsonRoundTripIsExact) {
  ScratchDir dir;
  CalibrationStats s = three_layers();
  s.layers[1].x_scale = 0.1 + 0.2;  // not a short decimal
  s.layers[2].gw_max = 1e-300;
  const std::string path = dir.file("stats.json");
  calibration_stats_write(path, s);
  const CalibrationStats r = calibration_stats_load(path);
  EXPECT_EQ(r.version, 1);
  EXPECT_EQ(r.model, s.model);
  EXPECT_EQ(r.model_hash, s.model_hash);
  EXPECT_EQ(r.steps, s.steps);
  EXPECT_EQ(r.batch, s.batch);
  ASSERT_EQ(r.layers.size(), s.layers.size());
  for (size_t i = 0; i < s.layers.size(); ++i) {
    const LayerStats &a = s.layers[i], &b = r.layers[i];
    EXPECT_EQ(a.layer, b.layer);
    EXPECT_EQ(a.depth, b.depth);
    for (auto f : {&LayerStats::x_scale, &LayerStats::w_scale, &LayerStats::x_norm, &LayerStats::w_norm,
                   &LayerStats::gw_norm, &LayerStats::gw_max, &LayerStats::w_quant_error, &LayerStats::dy_scale,
                   &LayerStats::dy_norm, &LayerStats::w_error_fp16, &LayerStats::w_error_bf16,
                   &LayerStats::w_error_fp8})
      EXPECT_EQ(a.*f, b.*f);
    EXPECT_EQ(a.x_numel, b.x_numel);
    EXPECT_EQ(a.w_numel, b.w_numel);
    EXPECT_EQ(a.y_numel, b.y_numel);
  }
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"stats.json"});  // no temp file left
}

void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

TEST(CalibrationStats, BadFilesNameTheProblemAndTheFix) {
  ScratchDir dir;
  const std::string fix = "qsync-worker calibrate";
  expect_error<std::runtime_error>([&] { calibration_stats_load(dir.file("missing.json")); }, {"missing.json"});
  const std::string path = dir.file("bad.json");
  write_text(path, "{ not json");
  expect_error<std::runtime_error>([&] { calibration_stats_load(path); }, {path, "not valid JSON", fix});
  write_text(path, "[1, 2]");
  expect_error<std::runtime_error>([&] { calibration_stats_load(path); }, {"not a JSON object", fix});
  write_text(path, R"({"format": ["qsync-calibration"]})");  // found by tests/fuzz: a type_error escaped
  expect_error<std::runtime_error>([&] { calibration_stats_load(path); }, {"not a qsync-calibration file", fix});
  write_text(path, R"({"format": "qsync-calibration", "steps": 1e999})");  // past double: nlohmann's out_of_range
  expect_error<std::runtime_error>([&] { calibration_stats_load(path); }, {path, "not valid JSON", fix});
  write_text(path, R"({"format": "qsync-plan", "version": 1})");
  expect_error<std::runtime_error>([&] { calibration_stats_load(path); }, {"not a qsync-calibration file", fix});

  const std::string good = calibration_stats_to_json(three_layers());
  auto edited = [&](const std::string& from, const std::string& to) {
    std::string t = good;
    const size_t at = t.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    write_text(path, t.replace(at, from.size(), to));
  };
  edited("\"version\": 1", "\"version\": 2");
  expect_error<std::runtime_error>([&] { calibration_stats_load(path); }, {"version 2", "reads version 1", fix});
  edited("\"gw_norm\": 3.0,", "");
  expect_error<std::runtime_error>([&] { calibration_stats_load(path); }, {"layer 'fc1'", "no field 'gw_norm'", fix});
  edited("\"x_scale\": 0.5", "\"x_scale\": -0.5");
  expect_error<std::runtime_error>([&] { calibration_stats_load(path); }, {"'x_scale'", ">= 0", fix});
  edited("\"x_numel\": 16", "\"x_numel\": 0");
  expect_error<std::runtime_error>([&] { calibration_stats_load(path); }, {"zero element count", fix});
  edited("\"layer\": \"fc2\"", "\"layer\": \"fc1\"");
  expect_error<std::runtime_error>([&] { calibration_stats_load(path); }, {"'fc1' appears twice", fix});
  edited("\"model_hash\": \"0123456789abcdef\"", "\"model_hash\": \"xyz\"");
  expect_error<std::runtime_error>([&] { calibration_stats_load(path); }, {"16 hex digits", fix});
}

TEST(CalibrationStats, CheckAgainstTheModel) {
  const ModelDesc m = model_desc_parse(
      "name: tiny\ntask: classification\ninput: {kind: image, shape: [1, 4, 4]}\nclasses: 3\n"
      "layers:\n  - {name: flatten, type: flatten}\n  - {name: fc1, type: linear, out: 8}\n"
      "  - {name: relu, type: relu}\n  - {name: fc2, type: linear, out: 3}\n",
      "tiny.yaml");
  CalibrationStats s = three_layers();
  expect_error<std::invalid_argument>([&] { calibration_stats_check(s, m); }, {"do not match model 'tiny'", "calibrate"});
  s.model_hash = m.hash;
  calibration_stats_check(s, m);  // fc1, fc2 present (fc3 extra is harmless)
  s.layers.erase(s.layers.begin() + 1);
  expect_error<std::invalid_argument>([&] { calibration_stats_check(s, m); }, {"no layer 'fc2'", "calibrate"});
}

}  // namespace
}  // namespace qsync
