// Unit tests for worker/layers/linear: forward against a naive reference, finite-difference
// gradients in FP32, per-precision errors against the FP32 layer, and saved-activation memory.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <tuple>

#include "tests/worker/gradient_check.h"
#include "tests/worker/layers/gemm_test_support.h"
#include "worker/layers/linear.h"
#include "worker/optimizer.h"
#include "worker/precision_ops.h"

namespace qsync::testing {
namespace {

constexpr double FP32_U = 0x1.0p-24;  // FP32 unit roundoff

TEST(LinearLayer, ParametersAndShapes) {
  activate_test_device_class();
  MemoryAccount account;
  LinearLayer fc(linear_desc("fc", {3, 7}, 5), &account);
  const std::vector<Parameter*> params = parameters_of(fc);
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0]->name, "fc.weight");
  EXPECT_EQ(params[0]->value.shape(), (Shape{5, 7}));
  EXPECT_TRUE(params[0]->decay);
  EXPECT_EQ(params[1]->name, "fc.bias");
  EXPECT_FALSE(params[1]->decay);
  EXPECT_EQ(account.current_bytes(), 2 * (5 * 7 + 5) * 4);  // values and grads
  LinearLayer nobias(linear_desc("nb", {7}, 5, false), nullptr);
  EXPECT_EQ(parameters_of(nobias).size(), 1u);
}

// y (B, T, N) = x W^T + b against a double-precision loop. FP32 summation of K products in any
// order errs by at most gamma_K = K u / (1 - K u) times sum |w x| (Higham, Thm 3.1); the bias
// add is one more rounding: bound (K + 2) u (sum |w x| + |b|).
TEST(LinearLayer, ForwardMatchesNaiveReference) {
  activate_test_device_class();
  std::mt19937_64 rng(1);
  const int64_t B = 3, T = 5, K = 37, N = 11;
  LinearLayer fc(linear_desc("fc", {T, K}, N), nullptr);
  fc.init_parameters(rng);
  const std::vector<Parameter*> params = parameters_of(fc);
  const float* w = params[0]->value.f32();
  const float* b = params[1]->value.f32();
  Tensor x = normal_tensor({B, T, K}, rng);
  StepContext ctx;
  ctx.training = false;
  Tensor y = fc.forward(x, ctx);
  ASSERT_EQ(y.shape(), (Shape{B, T, N}));
  for (int64_t m = 0; m < B * T; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double ref = b[n], mag = std::fabs(b[n]);
      for (int64_t k = 0; k < K; ++k) {
        ref += double(w[n * K + k]) * double(x.f32()[m * K + k]);
        mag += std::fabs(double(w[n * K + k]) * double(x.f32()[m * K + k]));
      }
      EXPECT_NEAR(y.f32()[m * N + n], ref, double(K + 2) * FP32_U * mag) << m << ", " << n;
    }
}

// Linear maps have no truncation error: step 1e-1 (gradient_check.h) keeps the rounding noise
// ~1e-5 relative with the default bounds.
TEST(LinearLayer, GradientCheck) {
  activate_test_device_class();
  for (bool bias : {true, false}) {
    SCOPED_TRACE(bias ? "bias" : "no bias");
    std::mt19937_64 rng(2);
    LinearLayer fc(linear_desc("fc", {3, 13}, 7, bias), nullptr);
    fc.init_parameters(rng);
    GradientCheckOptions opt;
    opt.step = 1e-1;
    GradientCheckResult r = gradient_check(fc, random_tensor({2, 3, 13}, rng), opt);
    EXPECT_TRUE(r.ok) << r.report();
  }
}

TEST(LinearLayer, GradientsAccumulate) {
  activate_test_device_class();
  std::mt19937_64 rng(3);
  LinearLayer fc(linear_desc("fc", {9}, 4), nullptr);
  fc.init_parameters(rng);
  Tensor x = normal_tensor({6, 9}, rng), dy = normal_tensor({6, 4}, rng);
  const StepResult once = run_step(fc, LayerPrecision::FP32, x, dy);
  StepContext ctx;
  fc.forward(x, ctx);
  fc.backward(dy, ctx);  // on top of run_step's gradients
  const std::vector<Parameter*> params = parameters_of(fc);
  for (size_t p = 0; p < params.size(); ++p)
    for (int64_t i = 0; i < params[p]->grad.numel(); ++i)
      EXPECT_FLOAT_EQ(params[p]->grad.f32()[i], 2.0f * once.grads[p][size_t(i)]) << params[p]->name << " " << i;
}

TEST(LinearLayer, NoInputGradientLeavesParameterGradientsAlone) {
  activate_test_device_class();
  std::mt19937_64 rng(5);
  LinearLayer fc(linear_desc("fc", {9}, 4), nullptr);
  fc.init_parameters(rng);
  expect_same_gradients_without_input_gradient(fc, normal_tensor({6, 9}, rng), normal_tensor({6, 4}, rng));
}

TEST(LinearLayer, BackwardWithoutForwardThrows) {
  activate_test_device_class();
  LinearLayer fc(linear_desc("fc", {4}, 2), nullptr);
  StepContext ctx;
  EXPECT_THROW(fc.backward(Tensor::zeros({1, 2}, Precision::FP32, nullptr), ctx), std::logic_error);
}

class LinearPrecision : public ::testing::TestWithParam<LayerPrecision> {};

// x (B, T, K) N(0, 1), dy N(0, 1), default init; bounds and their derivation in
// gemm_test_support.h. The bias gradient is summed from the FP32 dy in every precision: exact.
TEST_P(LinearPrecision, ErrorsAgainstFp32WithinBounds) {
  activate_test_device_class();
  const LayerPrecision p = GetParam();
  std::mt19937_64 rng(4);
  const int64_t B = 4, T = 24, K = 96, N = 40;
  LinearLayer fc(linear_desc("fc", {T, K}, N), nullptr);
  fc.init_parameters(rng);
  Tensor x = normal_tensor({B, T, K}, rng), dy = normal_tensor({B, T, N}, rng);
  for (const StepContext& ctx : backward_contexts(p)) {
    const PrecisionErrors e = measure_precision_errors(fc, p, x, dy, ctx);
    print_precision_errors("linear", p, ctx, e, parameters_of(fc));
    const ErrorBounds b = precision_error_bounds(p);
    EXPECT_LE(e.y, b.y);
    EXPECT_LE(e.dx, b.dx);
    EXPECT_LE(e.grads[0], b.dw);
    EXPECT_EQ(e.grads[1], 0.0) << "bias gradient";
    EXPECT_GT(e.y, 0.0) << "the precision changed nothing: was it applied?";
  }
}

// Saved bytes: x (M, K) in the forward precision, plus the weight copy (N, K) when it is not
// the FP32 master. With M = 128 rows and N = 16: INT8 (MK + NK) / 4MK = 0.28 of FP32, 16-bit
// (2MK + 2NK) / 4MK = 0.56.
TEST_P(LinearPrecision, SavedBytesShrinkAndAreReleased) {
  activate_test_device_class();
  const LayerPrecision p = GetParam();
  const int64_t B = 4, T = 32, K = 40, N = 16, M = B * T;
  std::mt19937_64 rng(5);
  MemoryAccount account;
  LinearLayer fc(linear_desc("fc", {T, K}, N), &account);
  fc.init_parameters(rng);
  Tensor x = normal_tensor({B, T, K}, rng);
  const int64_t fp32 = step_memory(fc, account, x, x.bytes());
  EXPECT_EQ(fp32, M * K * 4);
  fc.set_precision(p);
  const int64_t saved = step_memory(fc, account, x, 0);
  const int64_t elem = precision_bytes(layer_precision_traits(p).saved_activation);
  EXPECT_EQ(saved, (M * K + N * K) * elem);
  if (elem == 1) {
    EXPECT_LE(double(saved), 0.3 * double(fp32));
  }
  if (elem == 2) {
    EXPECT_GE(double(saved), 0.5 * double(fp32));
    EXPECT_LE(double(saved), 0.6 * double(fp32));
  }
}

INSTANTIATE_TEST_SUITE_P(Precisions, LinearPrecision, ::testing::ValuesIn(LOW_PRECISIONS), precision_test_name);

// The optimizer step makes the next forward's per-row INT8 weights in its pass over the updated
// weights (Parameter::int8_rows): bit for bit the forward's own cast, so a layer trained that way
// follows one whose copies never match a step (its optimizer is told another step: the same
// learning rate, constant schedule) exactly. Only the training forward of the tagged step takes
// the copy; any other forward casts the weights itself. A 19 x 37 weight updates with the other
// small slots in one loop over the threads, a 190 x 370 one in its own (cpu_loss_optimizer.cpp).
// The same pass finds the updated weights' amax (Parameter::int8_rows_amax), which int8-all's
// backward takes for its per-tensor re-quantization of the weights: the same bits again.
TEST(LinearLayer, Int8WeightsMadeAheadByTheOptimizerAreTheForwardsOwnCast) {
  for (const auto& [kind, in, out, precision] :
       {std::tuple{OptimizerKind::ADAMW, 37, 19, LayerPrecision::INT8},
        std::tuple{OptimizerKind::SGD, 37, 19, LayerPrecision::INT8},
        std::tuple{OptimizerKind::SGD, 370, 190, LayerPrecision::INT8},
        std::tuple{OptimizerKind::ADAMW, 37, 19, LayerPrecision::INT8_ALL},
        std::tuple{OptimizerKind::SGD, 370, 190, LayerPrecision::INT8_ALL}}) {
    SCOPED_TRACE(std::string(optimizer_kind_name(kind)) + " " + std::to_string(out) + " x " + std::to_string(in) + " " +
                 layer_precision_name(precision));
    std::mt19937_64 rng(3);
    LinearLayer ahead(linear_desc("fc", {4, in}, out), nullptr), own(linear_desc("fc", {4, in}, out), nullptr);
    ahead.init_parameters(rng);
    const std::vector<Parameter*> pa = parameters_of(ahead), po = parameters_of(own);
    for (size_t i = 0; i < pa.size(); ++i) std::memcpy(po[i]->value.data(), pa[i]->value.data(), size_t(pa[i]->value.bytes()));
    set_layer_precision(ahead, precision);
    set_layer_precision(own, precision);
    OptimizerConfig config;
    config.kind = kind;
    config.lr = 0.05;
    config.schedule = LrSchedule::CONSTANT;
    Optimizer opt_ahead(config, pa, nullptr), opt_own(config, po, nullptr);
    const Tensor x = normal_tensor({3, 4, in}, rng), dy = normal_tensor({3, 4, out}, rng);
    StepContext ctx;
    for (int64_t step = 0; step < 4; ++step) {
      ctx.step = step;
      ASSERT_EQ(values_of(ahead.forward(x, ctx)), values_of(own.forward(x, ctx))) << "step " << step;
      ASSERT_EQ(values_of(ahead.backward(dy, ctx)), values_of(own.backward(dy, ctx)));
      opt_ahead.step(step);
      opt_own.step(step + 1000);
      zero_grads(ahead);
      zero_grads(own);
      Parameter& w = *pa[0];
      ASSERT_TRUE(w.int8_rows.defined());
      EXPECT_EQ(w.int8_rows_step, step + 1);
      EXPECT_GT(w.int8_rows_qmax, 0);
      const Tensor cast = cast_weight(w.value, LayerPrecision::INT8, ctx, "fc", OperandRole::B);
      ASSERT_EQ(0, std::memcmp(cast.data(), w.int8_rows.data(), size_t(cast.bytes())));
      ASSERT_EQ(w.int8_rows.scale_mode, ScaleMode::PER_CHANNEL);
      for (int64_t r = 0; r < out; ++r) ASSERT_EQ(cast.scale_data()[r], w.int8_rows.scale_data()[r]) << "row " << r;
      float largest = 0.0f;
      for (float v : values_of(w.value)) largest = std::max(largest, std::fabs(v));
      EXPECT_EQ(w.int8_rows_amax, largest);
      EXPECT_EQ(values_of(w.value), values_of(po[0]->value));
    }
    Parameter& w = *pa[0];
    const void* made = w.int8_rows.data();
    ctx.step = 4;  // the tagged step, but evaluation: it casts for itself and leaves the copy
    ctx.training = false;
    EXPECT_NE(cast_parameter(w, LayerPrecision::INT8, ctx, "fc", OperandRole::B).data(), made);
    EXPECT_EQ(w.int8_rows.data(), made);
    ctx.training = true;  // the training forward of the tagged step takes it
    {
      const Tensor taken = cast_parameter(w, LayerPrecision::INT8, ctx, "fc", OperandRole::B);
      EXPECT_EQ(taken.data(), made);
      opt_ahead.step(4);  // (zero gradients) the taken copy is still held: a new one for step 5
      EXPECT_NE(w.int8_rows.data(), made);
    }
    const void* held = w.int8_rows.data();
    opt_ahead.step(5);  // nobody holds the copy for step 5 any more: rewritten in place for step 6
    EXPECT_EQ(w.int8_rows.data(), held);
    EXPECT_EQ(w.int8_rows_step, 6);
    ctx.step = 7;  // a training forward at another step casts for itself: its cast is the new buffer
    const Tensor own_cast = cast_parameter(w, LayerPrecision::INT8, ctx, "fc", OperandRole::B);
    EXPECT_EQ(w.int8_rows.data(), own_cast.data());
    EXPECT_EQ(w.int8_rows_step, -1);  // not for any step until an update rewrites it
    // A training forward in another precision withdraws the request: the next update makes none.
    ctx.training = true;
    (void)cast_parameter(w, LayerPrecision::BF16, ctx, "fc", OperandRole::B);
    EXPECT_EQ(w.int8_rows_qmax, 0);
  }
}

}  // namespace
}  // namespace qsync::testing
