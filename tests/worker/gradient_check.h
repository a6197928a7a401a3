// File: tests/worker/gradient_check.h
// A finite-difference gradient checker for any Layer (FP32 layers; a layer planned at a lower
// precision is checked against its own FP32 plan, not by this).
//
//   GradientCheckOptions opt;                       // defaults below, for O(1) inputs and weights
//   GradientCheckResult r = gradient_check(layer, x, opt);
//   EXPECT_TRUE(r.ok) << r.report();
//
// Method. With a fixed random projection r ~ N(0, 1) of the output, the scalar loss is
// L = sum_j r_j * y_j (accumulated in double), so dL/dy = r. One training forward and a backward
// of dy = r give the analytic dx and parameter grads (the grads are zeroed first and left holding
// the analytic values). Each probed element v of x and of every parameter is then moved to
// v + h and v - h and the loss recomputed by forward:
//   numeric = (L(v + h) - L(v - h)) / (float(v + h) - float(v - h))
// (the denominator is the step actually taken in FP32, not 2h). Probes run forward with
// ctx.training = probe_in_training; when true (layers whose training forward differs from
// eval, e.g. dropout, whose mask is fixed by (seed, step, name)), each probe's saved state is
// released by a backward of zeros, which adds nothing to the grads.
//
// Step and tolerances (defaults).
//   step h = 1e-3. Truncation error of the central difference is h^2 / 6 * |f'''| ~ 2e-7 for
//   O(1) curvature. Rounding: the outputs that do not depend on the probed element round the same
//   way at v + h and v - h and cancel exactly (the loss is summed in double), so the noise comes
//   from the k outputs that do: about u * sqrt(k) * |y| / (2h) ~ 3e-5 * sqrt(k) * |y| with u =
//   6e-8 (FP32 unit roundoff). For k <= 100 that is <= 3e-4 of an O(1) gradient.
//   Per element: |a - n| <= element_rtol * max(|a|, |n|) + element_atol * scale, with
//   element_rtol = 1e-2 and element_atol = 1e-3, scale = max(rms(a), rms(n)) over the probed
//   elements (an element far smaller than its tensor's typical gradient is all noise, so it gets
//   an absolute floor relative to the tensor, not a relative bound).
//   Over the tensor: normalized error ||a - n||_2 / max(||a||_2, ||n||_2) <= 1e-3, which the
//   rounding noise above stays ~3x under and a wrong term (a missing factor, a sign, a transposed
//   index) exceeds by orders of magnitude.
//   Both must hold. Layers linear in the probed tensor (GEMMs: y linear in x and in W) have no
//   truncation error at any step, so use a larger step there (e.g. 1e-1): the rounding noise
//   shrinks as 1/h, which matters for long accumulations (noise grows like sqrt(K) per output).
//   Inputs must be at least 2h away from kinks (ReLU at 0, max-pool ties).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "worker/layer.h"

namespace qsync::testing {

struct GradientCheckOptions {
  double step = 1e-3;                   // h
  double element_rtol = 1e-2;           // per-element relative bound
  double element_atol = 1e-3;           // per-element absolute floor, in units of the tensor's rms gradient
  double max_normalized_error = 1e-3;   // ||a - n|| / max(||a||, ||n||)
  int64_t max_probes = 256;             // per tensor; larger tensors probe an evenly strided subset
  bool check_input = true;              // false when the input has no gradient (embedding ids)
  bool probe_in_training = false;       // probes run forward in training mode (dropout)
  uint64_t projection_seed = 0x9e3779b9;  // seeds r
  StepContext ctx;                      // seed, step, memory (nullptr: unaccounted) for the layer
};

struct TensorGradientCheck {
  std::string name;             // "input" or the parameter's name
  int64_t probed = 0;
  double normalized_error = 0;  // ||a - n|| / max(||a||, ||n||) over the probed elements
  int64_t failures = 0;         // elements over the per-element bound
  int64_t worst_index = -1;     // flat index of the element with the largest |a - n| / bound
  double worst_analytic = 0, worst_numeric = 0;
  bool ok = true;
};

struct GradientCheckResult {
  std::vector<TensorGradientCheck> tensors;
  bool ok = true;

  std::string report() const {
    std::string s;
    char line[320];
    for (const TensorGradientCheck& t : tensors) {
      std::snprintf(line, sizeof line,
                    "%s %s: %lld probed, normalized error %.3g, %lld elements over bound, worst [%lld] "
                    "analytic %.6g numeric %.6g\n",
                    t.ok ? "ok  " : "FAIL", t.name.c_str(), (long long)t.probed, t.normalized_error,
                    (long long)t.failures, (long long)t.worst_index, t.worst_analytic, t.worst_numeric);
      s += line;
    }
    return s;
  }
};

namespace gradient_check_detail {

inline double projected_loss(const Tensor& y, const std::vector<float>& r) {
  const float* yp = y.f32();
  double l = 0.0;
  for (size_t j = 0; j < r.size(); ++j) l += double(r[j]) * double(yp[j]);
  return l;
}

inline std::vector<int64_t> probe_indices(int64_t n, int64_t max_probes) {
  std::vector<int64_t> idx;
  if (n <= max_probes) {
    for (int64_t i = 0; i < n; ++i) idx.push_back(i);
  } else {
    for (int64_t j = 0; j < max_probes; ++j) idx.push_back(j * n / max_probes);
  }
  return idx;
}

inline TensorGradientCheck compare(const std::string& name, const std::vector<int64_t>& index,
                                   const std::vector<double>& a, const std::vector<double>& n,
                                   const GradientCheckOptions& opt) {
  TensorGradientCheck t;
  t.name = name;
  t.probed = int64_t(a.size());
  double diff2 = 0, a2 = 0, n2 = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff2 += (a[i] - n[i]) * (a[i] - n[i]);
    a2 += a[i] * a[i];
    n2 += n[i] * n[i];
  }
  const double count = std::max<double>(1.0, double(a.size()));
  const double scale = std::sqrt(std::max(a2, n2) / count);
  const double denom = std::sqrt(std::max(a2, n2));
  t.normalized_error = denom > 0 ? std::sqrt(diff2) / denom : 0.0;
  double worst_ratio = -1;
  for (size_t i = 0; i < a.size(); ++i) {
    const double bound = opt.element_rtol * std::max(std::fabs(a[i]), std::fabs(n[i])) + opt.element_atol * scale;
    const double err = std::fabs(a[i] - n[i]);
    const double ratio = bound > 0 ? err / bound : (err > 0 ? INFINITY : 0.0);
    if (ratio > 1.0) ++t.failures;
    if (ratio > worst_ratio) {
      worst_ratio = ratio;
      t.worst_index = index[i];
      t.worst_analytic = a[i];
      t.worst_numeric = n[i];
    }
  }
  t.ok = t.failures == 0 && t.normalized_error <= opt.max_normalized_error;
  return t;
}

}  // namespace gradient_check_detail

// Checks layer.backward against central differences of L = sum(r * layer.forward(x)).
// `x` is not modified (probes perturb a copy). Parameters are restored after probing and their
// grads hold the analytic gradient of L on return.
inline GradientCheckResult gradient_check(Layer& layer, const Tensor& x, const GradientCheckOptions& opt = {}) {
  namespace d = gradient_check_detail;
  StepContext ctx = opt.ctx;
  ctx.training = true;
  std::vector<Parameter*> params;
  layer.collect_parameters(params);

  // Analytic gradients.
  Tensor xa = x.clone(ctx.memory, "gradient_check input");
  Tensor y = layer.forward(xa, ctx);
  std::vector<float> r(size_t(y.numel()));
  {
    std::mt19937_64 rng(opt.projection_seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (float& v : r) v = normal(rng);
  }
  Tensor dy = Tensor::empty(y.shape(), Precision::FP32, ctx.memory, "gradient_check dy");
  std::memcpy(dy.f32(), r.data(), r.size() * sizeof(float));
  const Shape y_shape = y.shape();
  y = Tensor();
  for (Parameter* p : params) std::memset(p->grad.f32(), 0, size_t(p->grad.bytes()));
  Tensor dx = layer.backward(dy, ctx);

  StepContext probe_ctx = opt.ctx;
  probe_ctx.training = opt.probe_in_training;
  auto loss_at = [&](const Tensor& input) {
    Tensor out = layer.forward(input, probe_ctx);
    const double l = d::projected_loss(out, r);
    out = Tensor();
    if (probe_ctx.training) {
      Tensor zeros = Tensor::zeros(y_shape, Precision::FP32, probe_ctx.memory, "gradient_check zeros");
      (void)layer.backward(zeros, probe_ctx);
    }
    return l;
  };
  // Numeric derivative at element i of buffer v (restored afterwards).
  auto numeric_at = [&](float* v, int64_t i, const Tensor& input) {
    const float v0 = v[i];
    const float plus = float(double(v0) + opt.step), minus = float(double(v0) - opt.step);
    v[i] = plus;
    const double lp = loss_at(input);
    v[i] = minus;
    const double lm = loss_at(input);
    v[i] = v0;
    return (lp - lm) / (double(plus) - double(minus));
  };

  GradientCheckResult result;
  if (opt.check_input) {
    Tensor xp = x.clone(probe_ctx.memory, "gradient_check probe input");
    const std::vector<int64_t> index = d::probe_indices(xp.numel(), opt.max_probes);
    std::vector<double> a, n;
    for (int64_t i : index) {
      a.push_back(double(dx.f32()[i]));
      n.push_back(numeric_at(xp.f32(), i, xp));
    }
    result.tensors.push_back(d::compare("input", index, a, n, opt));
  }
  for (Parameter* p : params) {
    const std::vector<int64_t> index = d::probe_indices(p->value.numel(), opt.max_probes);
    std::vector<double> a, n;
    for (int64_t i : index) {
      a.push_back(double(p->grad.f32()[i]));
      n.push_back(numeric_at(p->value.f32(), i, x));
    }
    result.tensors.push_back(d::compare(p->name, index, a, n, opt));
  }
  for (const TensorGradientCheck& t : result.tensors) result.ok = result.ok && t.ok;
  return result;
}

}  // namespace qsync::testing
