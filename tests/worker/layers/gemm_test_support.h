// File: tests/worker/layers/gemm_test_support.h
// Helpers for the GEMM layer tests (linear, conv2d, attention): the device class they run as,
// layer descriptions, N(0, 1) tensors, the per-precision error measurement against the FP32
// layer, and the per-precision error bounds with their derivation.
//
// Device class. Every test first calls activate_test_device_class() (oneDNN's ISA cap must be
// set before the first GEMM of the process): $QSYNC_TEST_DEVICE_CLASS, else the strongest CPU
// class here, with one thread. tests/worker/layers/CMakeLists.txt runs the precision tests a
// second time as cpu-avx2, where INT8 A operands are 7-bit (cpu_int8_activation_max() == 63).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/gemm_onednn.h"
#include "kernels/device_class.h"
#include "planner/layer_precision.h"
#include "planner/plan_file.h"
#include "tests/kernels/test_device_class.h"
#include "tests/worker/layers/layer_test_support.h"
#include "worker/layer.h"

namespace qsync::testing {

// A training context with the 16-bit backward format of INT8 layers set as the trainer sets it
// for the active class (worker/trainer.cpp): BF16 where the class computes it natively, else
// FP16 numerics emulated in FP32 GEMMs (cpu-avx2).
inline StepContext device_step_context(uint64_t seed = 7) {
  StepContext ctx;
  ctx.seed = seed;
  ctx.step = 3;
  ctx.training = true;
  ctx.sixteen_bit = Precision::FP16;
  ctx.sixteen_bit_native = false;
  for (const PrecisionCapability& c : device_class_capabilities(*device_class_active()))
    if (c.precision == Precision::BF16 && c.level == SupportLevel::NATIVE) {
      ctx.sixteen_bit = Precision::BF16;
      ctx.sixteen_bit_native = true;
    }
  return ctx;
}

inline LayerDesc linear_desc(const std::string& name, const Shape& in, int64_t out, bool bias = true) {
  LayerDesc d = make_desc(name, LayerKind::LINEAR, in);
  d.out = out;
  d.bias = bias;
  d.out_shape = in;
  d.out_shape.back() = out;
  return d;
}

// x (C, H, W) -> (O, H', W') with H' = (H + 2 pad - k) / stride + 1.
inline LayerDesc conv_desc(const std::string& name, int64_t c, int64_t h, int64_t w, int64_t out, int64_t k,
                           int64_t stride, int64_t pad, bool bias = true) {
  LayerDesc d = make_desc(name, LayerKind::CONV2D, {c, h, w});
  d.out = out;
  d.kernel = k;
  d.stride = stride;
  d.padding = pad;
  d.bias = bias;
  d.out_shape = {out, (h + 2 * pad - k) / stride + 1, (w + 2 * pad - k) / stride + 1};
  return d;
}

// x (T, C) -> (T, C), children "<name>.qkv" (out 3C) and "<name>.proj" (out C).
inline LayerDesc attention_desc(const std::string& name, int64_t t, int64_t c, int64_t heads, bool causal) {
  LayerDesc d = make_desc(name, LayerKind::ATTENTION, {t, c});
  d.heads = heads;
  d.causal = causal;
  d.out_shape = {t, c};
  d.children = {linear_desc(name + ".qkv", {t, c}, 3 * c), linear_desc(name + ".proj", {t, c}, c)};
  return d;
}

// Unaccounted (or charged to `account`) FP32 tensor with N(0, 1) entries.
inline Tensor normal_tensor(const Shape& shape, std::mt19937_64& rng, MemoryAccount* account = nullptr) {
  Tensor t = Tensor::empty(shape, Precision::FP32, account, "test input");
  std::normal_distribution<float> n(0.0f, 1.0f);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = n(rng);
  return t;
}

inline std::vector<Parameter*> parameters_of(Layer& layer) {
  std::vector<Parameter*> params;
  layer.collect_parameters(params);
  return params;
}

inline void zero_grads(Layer& layer) {
  for (Parameter* p : parameters_of(layer)) std::memset(p->grad.f32(), 0, size_t(p->grad.bytes()));
}

inline void set_layer_precision(Layer& layer, LayerPrecision p) {
  RankPlan plan;
  plan.default_precision = p;
  layer.apply_plan(plan);
}

// ||a - b||_2 / ||b||_2, in double.
inline double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  double d2 = 0, b2 = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    d2 += (double(a[i]) - double(b[i])) * (double(a[i]) - double(b[i]));
    b2 += double(b[i]) * double(b[i]);
  }
  return b2 > 0 ? std::sqrt(d2 / b2) : std::sqrt(d2);
}

// One training step's outputs: y, dx and every parameter gradient (in collect order).
struct StepResult {
  std::vector<float> y, dx;
  std::vector<std::vector<float>> grads;
};

inline StepResult run_step(Layer& layer, LayerPrecision p, const Tensor& x, const Tensor& dy,
                           StepContext ctx = device_step_context()) {
  set_layer_precision(layer, p);
  zero_grads(layer);
  StepResult r;
  r.y = values_of(layer.forward(x, ctx));
  r.dx = values_of(layer.backward(dy, ctx));
  for (Parameter* q : parameters_of(layer)) r.grads.push_back(values_of(q->grad));
  return r;
}

// The contexts a precision is measured under: the active class's; for int8 (whose backward is
// 16-bit) also the other 16-bit mode (BF16 storage where the class emulates FP16, and back).
inline std::vector<StepContext> backward_contexts(LayerPrecision p) {
  std::vector<StepContext> out = {device_step_context()};
  if (p == LayerPrecision::INT8) {
    StepContext other = out[0];
    other.sixteen_bit_native = !other.sixteen_bit_native;
    other.sixteen_bit = other.sixteen_bit_native ? Precision::BF16 : Precision::FP16;
    out.push_back(other);
  }
  return out;
}

// Relative errors of a precision's step against the FP32 step on the same weights and input.
struct PrecisionErrors {
  double y = 0, dx = 0;
  std::vector<double> grads;  // per parameter, collect order
};

inline PrecisionErrors measure_precision_errors(Layer& layer, LayerPrecision p, const Tensor& x, const Tensor& dy,
                                                const StepContext& ctx) {
  const StepResult ref = run_step(layer, LayerPrecision::FP32, x, dy, ctx);
  const StepResult got = run_step(layer, p, x, dy, ctx);
  set_layer_precision(layer, LayerPrecision::FP32);
  PrecisionErrors e;
  e.y = relative_error(got.y, ref.y);
  e.dx = relative_error(got.dx, ref.dx);
  for (size_t i = 0; i < ref.grads.size(); ++i) e.grads.push_back(relative_error(got.grads[i], ref.grads[i]));
  return e;
}

// Bounds on the relative errors (||.||_2 of the difference over ||.||_2 of the FP32 value) of
// y, dx and dW with N(0, 1) inputs and output gradients and PyTorch-default U(+-1/sqrt(K))
// weights. Per-element rounding errors are independent across the K terms of a dot product, so
// they add in quadrature like the signal does: the relative error of a GEMM output is the rms
// relative error of its operands' elements, combined in quadrature over the two operands.
//   Floating formats with m explicit mantissa bits (RNE): the spacing at v in [2^e, 2^(e+1)) is
//   2^(e-m), the error uniform in +-spacing/2, so rms(err / v) = 2^-m / sqrt(12) * sqrt(E[1/t^2])
//   with t log-uniform in [1, 2): sqrt(0.541) = 0.736. Per operand: bf16 (m = 7) 0.17%, fp16
//   (m = 10, and tf32) 0.021%, E4M3 (m = 3) 2.7%, E5M2 (m = 2) 5.3%. (FP8 scales put amax at max_finite,
//   so N(0, 1) data stays normal down to ~1e-4 of amax.)
//   Two operands: bf16 0.24%, fp16 0.03%, fp8 forward (E4M3 x E4M3) 3.8%, fp8 backward
//   (E5M2 x E4M3) 5.9%.
//   INT8, scale s = amax / qmax, error uniform in +-s/2 (rms s / sqrt(12)); with stochastic
//   rounding the variance is p(1 - p) s^2, 1/6 s^2 on average (rms s / sqrt(6)).
//   Activations (per tensor, N(0, 1), amax ~ 4 over a few thousand values): s / sqrt(12) /
//   rms(x) = 0.91% at qmax 127, 1.8% at 63 (the A operand without VNNI).
//   Weights (per output channel, U(+-b), amax ~ b, rms b / sqrt(3)): 0.39% at 127, 0.79% at 63;
//   re-quantized per tensor for int8-all's backward: the same within a few percent.
//   Gradients (int8-all, per tensor, stochastic, N(0, 1)): 1.3% at 127, 2.6% at 63.
//   int8:     y  sqrt(x^2 + w^2) <= sqrt(1.8^2 + 0.79^2) = 2.0% (both at 63: only A is)
//             dx dy and the INT8 weight in bf16: sqrt(0.79^2 + 0.24^2) = 0.8%
//             dW dy and the INT8 input in bf16:  sqrt(1.8^2 + 0.24^2) = 1.8%
//             (the backward's 16-bit format is bf16, or fp16 emulated where the class has no
//             native bf16: 8x finer, so the bf16 figures bound both)
//   int8-all: y  as int8; dx sqrt(2.6^2 + 0.79^2) = 2.7%; dW sqrt(2.6^2 + 1.8^2) = 3.2%
// Each bound is about 2x the worst case above: the amax of a finite N(0, 1) sample varies
// (linear_test's 9216 inputs reach 4.9, which alone scales the activation terms by 1.2), and
// the layers' bias terms, exact in every precision, only lower the error.
struct ErrorBounds {
  double y, dx, dw;
};

inline ErrorBounds precision_error_bounds(LayerPrecision p) {
  switch (p) {
    case LayerPrecision::FP32: return {0, 0, 0};
    case LayerPrecision::TF32: return {1e-3, 1e-3, 1e-3};  // m = 10 like fp16: 0.03% for two operands
    case LayerPrecision::BF16: return {6e-3, 6e-3, 6e-3};
    case LayerPrecision::FP16: return {1e-3, 1e-3, 1e-3};
    case LayerPrecision::INT8: return {4e-2, 2e-2, 4e-2};
    case LayerPrecision::INT8_ALL: return {4e-2, 6e-2, 7e-2};
    case LayerPrecision::FP8: return {8e-2, 1.2e-1, 1.2e-1};
  }
  return {0, 0, 0};
}

inline const LayerPrecision LOW_PRECISIONS[] = {LayerPrecision::BF16, LayerPrecision::FP16, LayerPrecision::INT8,
                                                LayerPrecision::INT8_ALL, LayerPrecision::FP8};

inline std::string precision_test_name(const ::testing::TestParamInfo<LayerPrecision>& info) {
  std::string n = layer_precision_name(info.param);
  for (char& c : n)
    if (c == '-') c = '_';
  return n;
}

// Prints the measured figures (the closing note quotes them).
inline void print_precision_errors(const std::string& what, LayerPrecision p, const StepContext& ctx,
                                   const PrecisionErrors& e, const std::vector<Parameter*>& params) {
  std::string line = what + " " + layer_precision_name(p) + " (int8 A max " + std::to_string(cpu_int8_activation_max()) +
                     ", backward " + precision_name(ctx.sixteen_bit) + (ctx.sixteen_bit_native ? "" : " emulated") +
                     "): y " + std::to_string(e.y * 100) + "%, dx " + std::to_string(e.dx * 100) + "%";
  for (size_t i = 0; i < params.size(); ++i) line += ", d" + params[i]->name + " " + std::to_string(e.grads[i] * 100) + "%";
  std::printf("[ errors   ] %s\n", line.c_str());
}

// One training step's memory with the layer's parameters charged to `account` before the
// baseline: after forward the account holds the output and the saved state (less the input
// itself when the layer saves it as is, i.e. FP32), after backward (dx dropped) the baseline plus
// the INT8 weight copies the parameters keep for the optimizer to rewrite (Parameter::int8_rows,
// the saved weight of an INT8 forward on a device whose optimizer makes them).
// Returns the saved bytes after forward.
inline int64_t step_memory(Layer& layer, MemoryAccount& account, const Tensor& x, int64_t aliased_input_bytes) {
  const int64_t baseline = account.current_bytes();
  StepContext ctx = device_step_context(5);
  ctx.memory = &account;
  int64_t saved = 0;
  {
    Tensor y = layer.forward(x, ctx);
    saved = layer.saved_bytes();
    EXPECT_EQ(account.current_bytes(), baseline + y.bytes() + saved - aliased_input_bytes) << layer.name();
    Tensor dy = Tensor::zeros(y.shape(), Precision::FP32, nullptr);
    Tensor dx = layer.backward(dy, ctx);
    EXPECT_EQ(layer.saved_bytes(), 0) << layer.name();
    EXPECT_EQ(dx.shape(), x.shape()) << layer.name();
  }
  int64_t kept = 0;
  for (Parameter* p : parameters_of(layer)) kept += p->int8_rows.defined() ? p->int8_rows.bytes() : 0;
  EXPECT_EQ(account.current_bytes(), baseline + kept) << layer.name() << ": memory not returned after backward";
  ctx.training = false;
  {
    Tensor y = layer.forward(x, ctx);
    EXPECT_EQ(layer.saved_bytes(), 0) << layer.name() << ": eval forward saved state";
  }
  EXPECT_EQ(account.current_bytes(), baseline + kept) << layer.name();
  return saved;
}

// Without an input gradient (the model's first layer) a GEMM layer returns an undefined dx and
// the same parameter gradients, bit for bit, in every precision.
inline void expect_same_gradients_without_input_gradient(Layer& layer, const Tensor& x, const Tensor& dy) {
  for (LayerPrecision p : {LayerPrecision::FP32, LayerPrecision::INT8, LayerPrecision::INT8_ALL}) {
    layer.set_input_gradient_needed(true);
    const StepResult with = run_step(layer, p, x, dy);
    layer.set_input_gradient_needed(false);
    zero_grads(layer);
    StepContext ctx = device_step_context();
    layer.forward(x, ctx);
    EXPECT_FALSE(layer.backward(dy, ctx).defined()) << layer_precision_traits(p).name;
    const std::vector<Parameter*> params = parameters_of(layer);
    for (size_t q = 0; q < params.size(); ++q)
      EXPECT_EQ(values_of(params[q]->grad), with.grads[q]) << params[q]->name << " " << layer_precision_traits(p).name;
  }
  layer.set_input_gradient_needed(true);
}

}  // namespace qsync::testing
