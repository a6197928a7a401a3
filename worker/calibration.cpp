// File: worker/calibration.cpp
// The calibration observer (per-layer running means of operand statistics), the short FP32
// training run of `qsync-worker calibrate`, and its arguments and report.
#include "worker/calibration.h"

#include "planner/cli_args.h"

#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "kernels/device_class.h"
#include "kernels/quantize.h"
#include "worker/loss.h"
#include "worker/model.h"
#include "worker/ops/rank_device.h"
#include "worker/optimizer.h"
#include "worker/train_data.h"
#include "worker/train_step.h"

namespace qsync {
namespace {

struct NormMax {
  double norm = 0, amax = 0;
};

NormMax norm_max(const Tensor& t) {
  const float* p = t.f32();
  double sum = 0, m = 0;
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double v = p[i];
    sum += v * v;
    m = std::max(m, std::fabs(v));
  }
  return {std::sqrt(sum), m};
}

// sum |q - w| / sum |w| (0 for an all-zero weight: every format holds it exactly).
double relative_error(const float* w, const std::vector<float>& q) {
  double err = 0, mag = 0;
  for (size_t i = 0; i < q.size(); ++i) {
    err += std::fabs(double(q[i]) - double(w[i]));
    mag += std::fabs(double(w[i]));
  }
  return mag > 0 ? err / mag : 0;
}

// INT8 per output channel (row), round to nearest even: what cast_weight does for int8.
double int8_rows_error(const Tensor& w) {
  const int64_t rows = w.dim(0), cols = w.numel() / rows;
  const size_t n = static_cast<size_t>(w.numel()), nr = static_cast<size_t>(rows);
  std::vector<float> row_amax(nr), scales(nr), q(n);
  std::vector<int8_t> q8(n);
  amax_rows(w.f32(), rows, cols, row_amax.data());
  for (size_t r = 0; r < nr; ++r) scales[r] = int8_scale_from_amax(row_amax[r]);
  quantize_int8_rows(w.f32(), q8.data(), rows, cols, scales.data(), Rounding::NEAREST_EVEN, 0);
  for (int64_t i = 0; i < w.numel(); ++i) q[size_t(i)] = float(q8[size_t(i)]) * scales[size_t(i / cols)];
  return relative_error(w.f32(), q);
}

// A float format, scaled per tensor by `scale` (1: no scaling).
double float_error(const Tensor& w, Precision p, float scale) {
  const PrecisionTraits& t = precision_traits(p);
  std::vector<float> q(size_t(w.numel()));
  const float inv = 1.0f / scale;
  for (int64_t i = 0; i < w.numel(); ++i) q[size_t(i)] = t.decode(t.encode(w.f32()[i] * inv)) * scale;
  return relative_error(w.f32(), q);
}

// How many output positions along one axis read input coordinate i (of n), per axis geometry.
std::vector<double> coverage(int64_t n, int64_t out, int64_t k, int64_t stride, int64_t pad) {
  std::vector<double> c(size_t(n), 0.0);
  for (int64_t o = 0; o < out; ++o)
    for (int64_t t = 0; t < k; ++t) {
      const int64_t i = o * stride - pad + t;
      if (i >= 0 && i < n) c[size_t(i)] += 1;
    }
  return c;
}


void print_report(const CalibrationStats& s) {
  std::printf("calibrated %s: %lld steps at batch %lld\n", s.model.c_str(), (long long)s.steps, (long long)s.batch);
  std::printf("%-16s %5s %10s %9s %9s %9s %9s %9s %9s\n", "layer", "depth", "x_numel", "x_scale", "w_scale", "|x|",
              "|w|", "|dW|", "w_err8");
  for (const LayerStats& l : s.layers)
    std::printf("%-16s %5d %10lld %9.3g %9.3g %9.3g %9.3g %9.3g %9.3g\n", l.layer.c_str(), l.depth,
                (long long)l.x_numel, l.x_scale, l.w_scale, l.x_norm, l.w_norm, l.gw_norm, l.w_quant_error);
  IndicatorOptions absolute;
  absolute.float_form = FloatTermForm::ABSOLUTE;
  const std::pair<const char*, IndicatorTable> tables[] = {
      {"bi-directional indicator (QSync float terms, gamma 4, int8 backward bf16)",
       indicator_table(s, IndicatorKind::BIDIRECTIONAL)},
      {"bi-directional indicator (absolute float terms, gamma 4, int8 backward bf16)",
       indicator_table(s, IndicatorKind::BIDIRECTIONAL, absolute)},
      {"weight-error indicator: log2(1 + relative weight error)", indicator_table(s, IndicatorKind::WEIGHT_ERROR)}};
  for (const auto& [title, t] : tables) {
    std::printf("\n%s\n%-16s", title, "layer");
    for (const LayerPrecisionTraits& p : layer_precision_table()) std::printf(" %10s", p.name);
    std::printf("\n");
    for (const LayerStats& l : s.layers) {
      std::printf("%-16s", l.layer.c_str());
      for (const LayerPrecisionTraits& p : layer_precision_table()) std::printf(" %10.4g", t.at(l.layer).at(p.mode));
      std::printf("\n");
    }
  }
}

}  // namespace

ColumnNorm conv_column_norm(const LayerDesc& d, const Tensor& x) {
  const int64_t batch = x.dim(0), c = d.in_shape.at(0), h = d.in_shape.at(1), w = d.in_shape.at(2);
  const std::vector<double> ch = coverage(h, d.out_shape.at(1), d.kernel, d.stride, d.padding);
  const std::vector<double> cw = coverage(w, d.out_shape.at(2), d.kernel, d.stride, d.padding);
  const float* p = x.f32();
  ColumnNorm r;
  double sum = 0;
  for (int64_t plane = 0; plane < batch * c; ++plane)
    for (int64_t yy = 0; yy < h; ++yy)
      for (int64_t xx = 0; xx < w; ++xx) {
        const double times = ch[size_t(yy)] * cw[size_t(xx)], v = p[(plane * h + yy) * w + xx];
        sum += times * v * v;
        if (times > 0) r.amax = std::max(r.amax, std::fabs(v));
      }
  r.norm = std::sqrt(sum);
  return r;
}

CalibrationObserver::CalibrationObserver(const ModelDesc& m) : model_name_(m.name), model_hash_(m.hash) {
  for (const LayerDesc* l : model_gemm_layers(m)) {
    layers_[l->name].depth = int(order_.size());
    order_.push_back(l->name);
  }
}

void CalibrationObserver::gemm_forward(const Layer& layer, const Tensor& x_seen, const Tensor& w_seen) {
  const Tensor x = tensor_to_host(x_seen), w = tensor_to_host(w_seen);  // GPU ranks: host copies
  const auto it = layers_.find(layer.name());
  if (it == layers_.end())
    throw std::logic_error("calibration: layer '" + layer.name() + "' is not a GEMM layer of model '" + model_name_ + "'");
  const LayerDesc& d = layer.desc();
  LayerStats& s = it->second.sum;
  const int64_t batch = x.dim(0);
  NormMax xs;
  if (d.kind == LayerKind::CONV2D) {
    const ColumnNorm cn = conv_column_norm(d, x);
    xs = {cn.norm, cn.amax};
  } else {
    xs = norm_max(x);
  }
  const NormMax ws = norm_max(w);
  s.x_scale += xs.amax / 127;
  s.x_norm += xs.norm;
  s.w_scale += ws.amax / 127;
  s.w_norm += ws.norm;
  s.x_numel = batch * d.gemm_rows * d.gemm_k;
  s.y_numel = batch * d.gemm_rows * d.gemm_n;
  s.w_numel = w.numel();
  s.w_quant_error += int8_rows_error(w);
  s.w_error_fp16 += float_error(w, Precision::FP16, 1.0f);
  s.w_error_bf16 += float_error(w, Precision::BF16, 1.0f);
  const float e4m3_max = precision_traits(Precision::FP8_E4M3).max_finite;
  s.w_error_fp8 += float_error(w, Precision::FP8_E4M3, fp8_scale_from_amax(float(ws.amax), e4m3_max));
  ++it->second.forwards;
}

void CalibrationObserver::gemm_backward(const Layer& layer, const Tensor& dy_seen, const Tensor& dw_seen) {
  const Tensor dy = tensor_to_host(dy_seen), dw = tensor_to_host(dw_seen);
  const auto it = layers_.find(layer.name());
  if (it == layers_.end())
    throw std::logic_error("calibration: layer '" + layer.name() + "' is not a GEMM layer of model '" + model_name_ + "'");
  LayerStats& s = it->second.sum;
  const NormMax gs = norm_max(dy), ws = norm_max(dw);
  s.dy_scale += gs.amax / 127;
  s.dy_norm += gs.norm;
  s.gw_norm += ws.norm;
  s.gw_max += ws.amax;
  ++it->second.backwards;
}

CalibrationStats CalibrationObserver::stats(int64_t steps, int64_t batch) const {
  CalibrationStats out;
  out.model = model_name_;
  out.model_hash = model_hash_;
  out.steps = steps;
  out.batch = batch;
  for (const std::string& name : order_) {
    const Sums& a = layers_.at(name);
    if (a.forwards == 0 || a.backwards == 0)
      throw std::logic_error("calibration: layer '" + name + "' saw " + std::to_string(a.forwards) + " forwards and " +
                             std::to_string(a.backwards) + " backwards; run at least one training step first");
    const double f = double(a.forwards), b = double(a.backwards);
    LayerStats l = a.sum;
    l.layer = name;
    l.depth = a.depth;
    l.x_scale /= f;
    l.w_scale /= f;
    l.x_norm /= f;
    l.w_norm /= f;
    l.w_quant_error /= f;
    l.w_error_fp16 /= f;
    l.w_error_bf16 /= f;
    l.w_error_fp8 /= f;
    l.dy_scale /= b;
    l.dy_norm /= b;
    l.gw_norm /= b;
    l.gw_max /= b;
    out.layers.push_back(l);
  }
  return out;
}

const char* CALIBRATE_USAGE =
    "usage: qsync-worker calibrate --model FILE|NAME [--data DIR|FILE] [--steps N (10)] [--batch B (128)]\n"
    "         [--seed S] [--device-class C] [--threads N] [--quiet] --out FILE\n"
    "  A short FP32 training run recording per-layer statistics for the planner's precision\n"
    "  indicators (docs/indicator.md).\n";

CalibrateConfig calibrate_parse_args(int argc, char** argv) {
  CalibrateConfig c;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quiet") {
      c.quiet = true;
      continue;
    }
    const bool known = a == "--model" || a == "--data" || a == "--out" || a == "--steps" || a == "--batch" ||
                       a == "--seed" || a == "--device-class" || a == "--threads";
    if (!known) throw std::invalid_argument("calibrate: unknown argument '" + a + "'\n" + CALIBRATE_USAGE);
    if (i + 1 >= argc) throw std::invalid_argument("calibrate: " + a + " needs a value");
    const std::string v = argv[++i];
    if (a == "--model") c.model = v;
    if (a == "--data") c.data = v;
    if (a == "--out") c.out = v;
    if (a == "--device-class") c.device_class = v;
    if (a == "--steps") c.steps = parse_int_flag(a, v);
    if (a == "--batch") c.batch = parse_int_flag(a, v);
    if (a == "--seed") c.seed = uint64_t(parse_int_flag(a, v));
    if (a == "--threads") c.threads = int(parse_int_flag(a, v));
  }
  if (c.model.empty()) throw std::invalid_argument(std::string("calibrate: --model is required\n") + CALIBRATE_USAGE);
  if (c.out.empty())
    throw std::invalid_argument(std::string("calibrate: --out FILE is required (where the stats go)\n") + CALIBRATE_USAGE);
  return c;
}

CalibrationStats calibrate_run(const CalibrateConfig& c) {
  if (c.steps < 1) throw std::invalid_argument("calibrate: --steps must be at least 1, got " + std::to_string(c.steps));
  if (c.batch < 1) throw std::invalid_argument("calibrate: --batch must be positive, got " + std::to_string(c.batch));
  const ModelDesc desc = model_desc_find(c.model);
  const DeviceClass& device = c.device_class.empty() ? device_class_fallback(device_class_by_name("cpu-amx"))
                                                     : device_class_by_name(c.device_class);
  device_class_activate(device, c.threads);

  RankDevice rank_device(device);  // a GPU class calibrates on its GPU (the statistics are copied to the host)
  DeviceOps& ops = rank_device.ops();
  MemoryAccount memory(0, "calibration");
  Model model(desc, &memory, c.seed, &ops);
  model.apply_plan(plan_uniform(desc, LayerPrecision::FP32));
  auto data = TrainingData::open(desc, c.data, BatchSharding::single(c.batch), c.seed, 1);
  OptimizerConfig oc;
  oc.total_steps = c.steps;
  Optimizer opt(oc, model.parameters(), &memory, &ops);

  CalibrationObserver observer(desc);
  StepContext ctx;
  ctx.ops = &ops;
  ctx.memory = &memory;
  ctx.seed = c.seed;
  ctx.observer = &observer;
  Shape shape = desc.input_shape;
  shape.insert(shape.begin(), c.batch);
  LossScaler no_scaling;
  RankStep step_runner(model, opt, nullptr, no_scaling, shape, c.batch * data->positions_per_sample(), &memory);
  const float loss_divisor = float(double(c.batch) * double(data->positions_per_sample()));
  for (int64_t step = 0; step < c.steps; ++step) {
    data->next(step_runner.host_batch(), step_runner.host_targets());
    ctx.step = step;
    step_runner.run(ctx, loss_divisor);
  }
  const CalibrationStats stats = observer.stats(c.steps, c.batch);
  if (!c.out.empty()) calibration_stats_write(c.out, stats);
  if (!c.quiet) {
    print_report(stats);
    if (!c.out.empty()) std::printf("\nwrote %s\n", c.out.c_str());
  }
  return stats;
}

}  // namespace qsync
