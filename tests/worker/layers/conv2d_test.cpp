// Unit tests for worker/layers/conv2d: forward against a naive direct convolution, finite-
// difference gradients in FP32 on awkward geometries, per-precision errors against the FP32
// layer, and saved-activation memory.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <set>
#include <string>

#include "kernels/cpu_isa.h"
#include "tests/worker/gradient_check.h"
#include "tests/worker/layers/gemm_test_support.h"
#include "worker/layers/activation.h"
#include "worker/layers/conv2d.h"
#include "worker/layers/pool.h"
#include "worker/layers/shape_check.h"
#include "worker/precision_ops.h"

namespace qsync::testing {
namespace {

constexpr double FP32_U = 0x1.0p-24;  // FP32 unit roundoff

struct Geometry {
  int64_t batch, c, h, w, o, k, stride, pad;
  bool bias;
};

std::string describe(const Geometry& g) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "B%lld C%lld %lldx%lld O%lld k%lld s%lld p%lld%s", (long long)g.batch, (long long)g.c,
                (long long)g.h, (long long)g.w, (long long)g.o, (long long)g.k, (long long)g.stride, (long long)g.pad,
                g.bias ? "" : " no bias");
  return buf;
}

LayerDesc desc_of(const Geometry& g) { return conv_desc("conv", g.c, g.h, g.w, g.o, g.k, g.stride, g.pad, g.bias); }

// Odd and even sizes, stride 1 and 2, padding 0 and 1, kernel 1 and 3, with and without bias.
// The last one has H'W' = 33 * 31 = 1023 outputs per sample: 2 samples per im2col chunk of
// about 2048 columns (its 16 * 9 taps make 147 KiB of INT8 columns a sample, past the 256 KiB a
// chunk may grow to for few taps), so its batch of 3 runs as two chunks (2 + 1).
const Geometry GEOMETRIES[] = {
    {2, 3, 7, 5, 4, 3, 1, 1, true},  {2, 2, 8, 7, 3, 3, 2, 0, true},  {3, 3, 9, 6, 5, 1, 1, 0, true},
    {2, 2, 7, 9, 3, 3, 2, 1, false}, {2, 1, 5, 5, 2, 1, 2, 0, true},  {1, 2, 3, 4, 2, 3, 1, 0, true},
    {3, 16, 33, 31, 3, 3, 1, 1, true},
};

// Direct convolution in double: y[b][o][oy][ox] = bias[o] + sum over (ci, ky, kx) inside the
// image of W[o][(ci k + ky) k + kx] x[b][ci][oy s - p + ky][ox s - p + kx]. Returns also the
// sum of the terms' magnitudes per output (for the rounding bound).
void naive_conv(const Geometry& g, const float* x, const float* w, const float* bias, std::vector<double>& y,
                std::vector<double>& mag) {
  const int64_t oh = (g.h + 2 * g.pad - g.k) / g.stride + 1, ow = (g.w + 2 * g.pad - g.k) / g.stride + 1;
  y.assign(size_t(g.batch * g.o * oh * ow), 0.0);
  mag.assign(y.size(), 0.0);
  for (int64_t b = 0; b < g.batch; ++b)
    for (int64_t o = 0; o < g.o; ++o)
      for (int64_t oy = 0; oy < oh; ++oy)
        for (int64_t ox = 0; ox < ow; ++ox) {
          const size_t at = size_t(((b * g.o + o) * oh + oy) * ow + ox);
          double s = bias ? bias[o] : 0.0, m = bias ? std::fabs(bias[o]) : 0.0;
          for (int64_t ci = 0; ci < g.c; ++ci)
            for (int64_t ky = 0; ky < g.k; ++ky)
              for (int64_t kx = 0; kx < g.k; ++kx) {
                const int64_t yy = oy * g.stride - g.pad + ky, xx = ox * g.stride - g.pad + kx;
                if (yy < 0 || yy >= g.h || xx < 0 || xx >= g.w) continue;
                const double t = double(w[(ci * g.k + ky) * g.k + kx + o * g.c * g.k * g.k]) *
                                 double(x[((b * g.c + ci) * g.h + yy) * g.w + xx]);
                s += t;
                m += std::fabs(t);
              }
          y[at] = s;
          mag[at] = m;
        }
}

TEST(Conv2dLayer, ParametersAndShapes) {
  activate_test_device_class();
  MemoryAccount account;
  Conv2dLayer conv(conv_desc("conv1", 3, 8, 8, 5, 3, 2, 1), &account);
  const std::vector<Parameter*> params = parameters_of(conv);
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0]->name, "conv1.weight");
  EXPECT_EQ(params[0]->value.shape(), (Shape{5, 3 * 3 * 3}));
  EXPECT_EQ(params[1]->name, "conv1.bias");
  EXPECT_EQ(account.current_bytes(), 2 * (5 * 27 + 5) * 4);
  StepContext ctx;
  ctx.training = false;
  std::mt19937_64 rng(1);
  EXPECT_EQ(conv.forward(normal_tensor({2, 3, 8, 8}, rng), ctx).shape(), (Shape{2, 5, 4, 4}));
}

// FP32 summation of the C k^2 taps (K of them) errs by at most gamma_K sum |w x| in any order
// (Higham, Thm 3.1), plus one rounding for the bias: bound (K + 2) u (sum |w x| + |b|).
TEST(Conv2dLayer, ForwardMatchesNaiveDirectConvolution) {
  activate_test_device_class();
  for (const Geometry& g : GEOMETRIES) {
    SCOPED_TRACE(describe(g));
    std::mt19937_64 rng(2);
    Conv2dLayer conv(desc_of(g), nullptr);
    conv.init_parameters(rng);
    const std::vector<Parameter*> params = parameters_of(conv);
    Tensor x = normal_tensor({g.batch, g.c, g.h, g.w}, rng);
    StepContext ctx;
    ctx.training = false;
    Tensor y = conv.forward(x, ctx);
    std::vector<double> ref, mag;
    naive_conv(g, x.f32(), params[0]->value.f32(), g.bias ? params[1]->value.f32() : nullptr, ref, mag);
    ASSERT_EQ(y.numel(), int64_t(ref.size()));
    const double K = double(g.c * g.k * g.k);
    int64_t bad = 0;
    for (size_t i = 0; i < ref.size(); ++i)
      if (std::fabs(double(y.f32()[i]) - ref[i]) > (K + 2) * FP32_U * mag[i]) ++bad;
    EXPECT_EQ(bad, 0);
  }
}

// Conv is linear in x and in W: step 1e-1 (no truncation error; see gradient_check.h).
TEST(Conv2dLayer, GradientCheck) {
  activate_test_device_class();
  for (const Geometry& g : GEOMETRIES) {
    SCOPED_TRACE(describe(g));
    std::mt19937_64 rng(3);
    Conv2dLayer conv(desc_of(g), nullptr);
    conv.init_parameters(rng);
    GradientCheckOptions opt;
    opt.step = 1e-1;
    GradientCheckResult r = gradient_check(conv, random_tensor({g.batch, g.c, g.h, g.w}, rng), opt);
    EXPECT_TRUE(r.ok) << r.report();
  }
}

TEST(Conv2dLayer, GradientsAccumulate) {
  activate_test_device_class();
  const Geometry g = GEOMETRIES[1];
  std::mt19937_64 rng(4);
  Conv2dLayer conv(desc_of(g), nullptr);
  conv.init_parameters(rng);
  Tensor x = normal_tensor({g.batch, g.c, g.h, g.w}, rng);
  Tensor dy = normal_tensor({g.batch, g.o, 3, 3}, rng);
  const StepResult once = run_step(conv, LayerPrecision::FP32, x, dy);
  StepContext ctx;
  conv.forward(x, ctx);
  conv.backward(dy, ctx);
  const std::vector<Parameter*> params = parameters_of(conv);
  for (size_t p = 0; p < params.size(); ++p)
    for (int64_t i = 0; i < params[p]->grad.numel(); ++i)
      EXPECT_FLOAT_EQ(params[p]->grad.f32()[i], 2.0f * once.grads[p][size_t(i)]) << params[p]->name << " " << i;
}

// oneDNN's backward (fp32, int8's 16-bit backward) and the im2col path (int8-all) alike.
TEST(Conv2dLayer, NoInputGradientLeavesParameterGradientsAlone) {
  activate_test_device_class();
  const Geometry g = GEOMETRIES[1];
  std::mt19937_64 rng(6);
  Conv2dLayer conv(desc_of(g), nullptr);
  conv.init_parameters(rng);
  expect_same_gradients_without_input_gradient(conv, normal_tensor({g.batch, g.c, g.h, g.w}, rng),
                                               normal_tensor({g.batch, g.o, 3, 3}, rng));
}

// oneDNN's weight gradient of one input channel idles seven lanes of eight in its AVX2 kernel, so
// below AVX-512 that backward runs as GEMMs over im2col columns, from AVX-512 up on oneDNN
// (cpu_conv.cpp); the op names say which ran. Its gradients are checked by GradientCheck (the
// fifth geometry has one channel), which runs as cpu-avx2 too.
TEST(Conv2dLayer, OneInputChannelBackwardRunsOnTheIm2colPathBelowAvx512) {
  activate_test_device_class();
  struct Recorder : OpTimer {
    std::set<std::string> ops;
    void record(const std::string& op, double) override { ops.insert(op); }
  } timer;
  const Geometry g{4, 1, 12, 10, 8, 3, 1, 1, true};
  std::mt19937_64 rng(12);
  Conv2dLayer conv(desc_of(g), nullptr);
  conv.init_parameters(rng);
  StepContext ctx = device_step_context();
  ctx.timer = &timer;
  conv.forward(normal_tensor({g.batch, g.c, g.h, g.w}, rng), ctx);
  conv.backward(normal_tensor({g.batch, g.o, g.h, g.w}, rng), ctx);
  const bool im2col = cpu_isa_active() < CpuIsa::AVX512;
  EXPECT_EQ(timer.ops.count("conv.gemm_weight_grad"), im2col ? 1u : 0u);
  EXPECT_EQ(timer.ops.count("conv.conv_backward"), im2col ? 0u : 1u);
}

// int8-all and fp8 run the backward as GEMMs over im2col chunks, the threads a chunk each
// (cpu_conv_chunks.cpp), and add each chunk's weight gradient in chunk order: dx, dW and db must
// be the same bits at 1, 2 and 3 threads. B9, 16 channels at 33x31 positions (147 KiB of INT8
// columns a sample): chunks of 2 samples (five, the last of one), so teams of 2 and 3 end on a
// part-filled wave; 16 output channels, split unevenly over 3 threads for the adds.
TEST(Conv2dLayer, ChunkedBackwardGivesTheSameBitsAtAnyThreadCount) {
  activate_test_device_class();
  const Geometry g{9, 16, 33, 31, 16, 3, 1, 1, true};
  const int threads_before = omp_get_max_threads();
  for (const LayerPrecision p : {LayerPrecision::INT8_ALL, LayerPrecision::FP8}) {
    SCOPED_TRACE(layer_precision_name(p));
    std::vector<std::vector<float>> first;
    for (const int threads : {1, 2, 3}) {
      omp_set_num_threads(threads);
      std::mt19937_64 rng(10);
      Conv2dLayer conv(desc_of(g), nullptr);
      conv.init_parameters(rng);
      set_layer_precision(conv, p);
      Tensor x = normal_tensor({g.batch, g.c, g.h, g.w}, rng), dy = normal_tensor({g.batch, g.o, g.h, g.w}, rng);
      StepContext ctx = device_step_context();
      conv.forward(x, ctx);
      std::vector<std::vector<float>> got = {values_of(conv.backward(dy, ctx))};
      for (Parameter* q : parameters_of(conv)) got.push_back(values_of(q->grad));
      if (first.empty()) first = got;
      for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], first[i]) << threads << " threads, output " << i;
    }
  }
  omp_set_num_threads(threads_before);
}

class Conv2dPrecision : public ::testing::TestWithParam<LayerPrecision> {};

// x (6, 5, 11, 9) N(0, 1), 8 output channels, 3x3 stride 1 padding 1 (K = 45), dy N(0, 1);
// bounds and their derivation in gemm_test_support.h (here the weight is the A operand, so it
// is the 7-bit one without VNNI). The bias gradient is summed from the FP32 dy: exact.
TEST_P(Conv2dPrecision, ErrorsAgainstFp32WithinBounds) {
  activate_test_device_class();
  const LayerPrecision p = GetParam();
  std::mt19937_64 rng(5);
  const Geometry g{6, 5, 11, 9, 8, 3, 1, 1, true};
  Conv2dLayer conv(desc_of(g), nullptr);
  conv.init_parameters(rng);
  Tensor x = normal_tensor({g.batch, g.c, g.h, g.w}, rng), dy = normal_tensor({g.batch, g.o, g.h, g.w}, rng);
  for (const StepContext& ctx : backward_contexts(p)) {
    const PrecisionErrors e = measure_precision_errors(conv, p, x, dy, ctx);
    print_precision_errors("conv2d", p, ctx, e, parameters_of(conv));
    const ErrorBounds b = precision_error_bounds(p);
    EXPECT_LE(e.y, b.y);
    EXPECT_LE(e.dx, b.dx);
    EXPECT_LE(e.grads[0], b.dw);
    EXPECT_EQ(e.grads[1], 0.0) << "bias gradient";
    EXPECT_GT(e.y, 0.0) << "the precision changed nothing: was it applied?";
  }
}

// Saved bytes: x (B, C, H, W) in the forward precision plus the weight copy (O, C k^2) when it
// is not the FP32 master: INT8 (2400 + 288) / 9600 = 0.28 of FP32, 16-bit 0.56.
TEST_P(Conv2dPrecision, SavedBytesShrinkAndAreReleased) {
  activate_test_device_class();
  const LayerPrecision p = GetParam();
  const Geometry g{6, 4, 10, 10, 8, 3, 1, 1, true};
  std::mt19937_64 rng(6);
  MemoryAccount account;
  Conv2dLayer conv(desc_of(g), &account);
  conv.init_parameters(rng);
  Tensor x = normal_tensor({g.batch, g.c, g.h, g.w}, rng);
  const int64_t fp32 = step_memory(conv, account, x, x.bytes());
  EXPECT_EQ(fp32, x.bytes());
  conv.set_precision(p);
  const int64_t saved = step_memory(conv, account, x, 0);
  const int64_t elem = precision_bytes(layer_precision_traits(p).saved_activation);
  EXPECT_EQ(saved, (x.numel() + g.o * g.c * g.k * g.k) * elem);
  if (elem == 1) {
    EXPECT_LE(double(saved), 0.3 * double(fp32));
  }
  if (elem == 2) {
    EXPECT_GE(double(saved), 0.5 * double(fp32));
    EXPECT_LE(double(saved), 0.6 * double(fp32));
  }
}

INSTANTIATE_TEST_SUITE_P(Precisions, Conv2dPrecision, ::testing::ValuesIn(LOW_PRECISIONS), precision_test_name);

// A ReLU fused into the convolution before it (Conv2dLayer::fuse_relu, which SequentialLayer
// does for every convolution followed by a ReLU) gives the same bits as the two layers one after
// the other: y, dx and the parameter gradients, in FP32 and every lower precision (oneDNN's relu
// post-op, the INT8 output transform, the im2col path's bias pass), in training and evaluation.
TEST_P(Conv2dPrecision, FusedReluGivesTheBitsOfTheReluLayerAfterIt) {
  activate_test_device_class();
  for (const LayerPrecision p : {LayerPrecision::FP32, GetParam()}) {
    for (const Geometry& g : {GEOMETRIES[0], GEOMETRIES[6], Geometry{6, 5, 11, 9, 8, 3, 1, 1, true}}) {
      SCOPED_TRACE(describe(g) + " " + layer_precision_name(p));
      std::mt19937_64 rng(8);
      Conv2dLayer conv(desc_of(g), nullptr), fused_conv(desc_of(g), nullptr);
      conv.init_parameters(rng);
      const std::vector<Parameter*> from = parameters_of(conv), to = parameters_of(fused_conv);
      for (size_t i = 0; i < from.size(); ++i) std::memcpy(to[i]->value.data(), from[i]->value.data(), size_t(from[i]->value.bytes()));
      LayerDesc relu_desc = make_desc("relu", LayerKind::RELU, conv.desc().out_shape);
      relu_desc.out_shape = relu_desc.in_shape;
      ReluLayer relu(relu_desc, nullptr), fused_relu(relu_desc, nullptr);
      fused_conv.fuse_relu(fused_relu);
      ASSERT_TRUE(fused_relu.applied_by_previous_layer());
      set_layer_precision(conv, p);
      set_layer_precision(fused_conv, p);
      const Shape out = {g.batch, conv.desc().out_shape[0], conv.desc().out_shape[1], conv.desc().out_shape[2]};
      Tensor x = normal_tensor({g.batch, g.c, g.h, g.w}, rng), dy = normal_tensor(out, rng);
      StepContext ctx = device_step_context(), fused_ctx = device_step_context();
      const std::vector<float> y = values_of(relu.forward(conv.forward(x, ctx), ctx));
      const std::vector<float> fused_y = values_of(fused_relu.forward(fused_conv.forward(x, fused_ctx), fused_ctx));
      ASSERT_EQ(fused_y, y);
      EXPECT_GT(std::count(y.begin(), y.end(), 0.0f), 0) << "no output was negative";
      // The ReLU's backward is deferred to the convolution exactly where the cast reads the mask.
      EXPECT_EQ(fused_relu.backward_deferred(fused_ctx), cast_gradient_reads_relu_mask(p, fused_ctx));
      EXPECT_EQ(values_of(fused_conv.backward(fused_relu.backward(dy, fused_ctx), fused_ctx)),
                values_of(conv.backward(relu.backward(dy, ctx), ctx)));
      for (size_t i = 0; i < from.size(); ++i) EXPECT_EQ(values_of(to[i]->grad), values_of(from[i]->grad)) << from[i]->name;
      EXPECT_EQ(fused_relu.saved_bytes(), 0) << "the mask outlived the backward";
      ctx.training = fused_ctx.training = false;
      EXPECT_EQ(values_of(fused_relu.forward(fused_conv.forward(x, fused_ctx), fused_ctx)),
                values_of(relu.forward(conv.forward(x, ctx), ctx)));
    }
  }
}

// A 2x2 / stride-2 max pooling after the fused ReLU, fused too (Conv2dLayer::fuse_pool, which
// SequentialLayer does for every convolution, ReLU, pooling), gives the bits of the three layers
// one after the other: pooled y, dx and the parameter gradients, in training and evaluation. The
// CPU runs it in the INT8 convolutions' output pass (pooled output straight from the fused
// convolution); every other precision and device runs the layers as before.
TEST_P(Conv2dPrecision, FusedPoolGivesTheBitsOfThePoolingLayerAfterIt) {
  activate_test_device_class();
  const Geometry shapes[] = {GEOMETRIES[0], GEOMETRIES[6], Geometry{6, 5, 11, 9, 8, 3, 1, 1, true},
                             Geometry{3, 4, 12, 10, 20, 3, 1, 1, true}};  // odd outputs, 3 / 8 / 20 channels
  int pooled_int8 = 0;  // shapes whose INT8 forward pooled in its output pass
  for (const LayerPrecision p : {LayerPrecision::FP32, GetParam()}) {
    for (const Geometry& g : shapes) {
      SCOPED_TRACE(describe(g) + " " + layer_precision_name(p));
      std::mt19937_64 rng(8);
      Conv2dLayer conv(desc_of(g), nullptr), fused_conv(desc_of(g), nullptr);
      conv.init_parameters(rng);
      const std::vector<Parameter*> from = parameters_of(conv), to = parameters_of(fused_conv);
      for (size_t i = 0; i < from.size(); ++i)
        std::memcpy(to[i]->value.data(), from[i]->value.data(), size_t(from[i]->value.bytes()));
      LayerDesc relu_desc = make_desc("relu", LayerKind::RELU, conv.desc().out_shape);
      relu_desc.out_shape = relu_desc.in_shape;
      LayerDesc pool_desc = make_desc("pool", LayerKind::MAXPOOL2D, conv.desc().out_shape);
      pool_desc.kernel = pool_desc.stride = 2;
      ReluLayer relu(relu_desc, nullptr), fused_relu(relu_desc, nullptr), relu_b(relu_desc, nullptr);
      MaxPool2dLayer pool(pool_desc, nullptr), fused_pool(pool_desc, nullptr);
      conv.fuse_relu(relu_b);  // the unfused chain: convolution with its ReLU, then the pooling layer
      fused_conv.fuse_relu(fused_relu);
      fused_conv.fuse_pool(fused_pool);
      set_layer_precision(conv, p);
      set_layer_precision(fused_conv, p);
      const Shape out = batched_shape(g.batch, pool.desc().out_shape);
      Tensor x = normal_tensor({g.batch, g.c, g.h, g.w}, rng), dy = normal_tensor(out, rng);
      StepContext ctx = device_step_context(), fused_ctx = device_step_context();
      const std::vector<float> y = values_of(pool.forward(relu_b.forward(conv.forward(x, ctx), ctx), ctx));
      const Tensor h = fused_conv.forward(x, fused_ctx);
      const bool pooled = h.shape() == out;
      pooled_int8 += pooled && layer_precision_traits(p).forward == Precision::INT8;
      if (layer_precision_traits(p).forward != Precision::INT8) {
        EXPECT_FALSE(pooled);
      }
      ASSERT_EQ(values_of(fused_pool.forward(fused_relu.forward(h, fused_ctx), fused_ctx)), y);
      const Tensor fused_dh = fused_relu.backward(fused_pool.backward(dy, fused_ctx), fused_ctx);
      EXPECT_EQ(values_of(fused_conv.backward(fused_dh, fused_ctx)),
                values_of(conv.backward(relu_b.backward(pool.backward(dy, ctx), ctx), ctx)));
      for (size_t i = 0; i < from.size(); ++i)
        EXPECT_EQ(values_of(to[i]->grad), values_of(from[i]->grad)) << from[i]->name;
      EXPECT_EQ(fused_pool.saved_bytes(), 0) << "the argmax outlived the backward";
      ctx.training = fused_ctx.training = false;
      const Tensor fused_h = fused_relu.forward(fused_conv.forward(x, fused_ctx), fused_ctx);
      EXPECT_EQ(values_of(fused_pool.forward(fused_h, fused_ctx)),
                values_of(pool.forward(relu_b.forward(conv.forward(x, ctx), ctx), ctx)));
    }
  }
  if (layer_precision_traits(GetParam()).forward == Precision::INT8) {
    EXPECT_GT(pooled_int8, 0);
  }
}

// A bias changes no other gradient: with one, the bias gradient's pass also finds the amax an
// INT8 gradient cast needs (CpuOps hands it on, known_amax); without, the cast finds it itself.
// Both give dx and dW bit for bit, a fused ReLU's mask (read on the fly) included.
TEST_P(Conv2dPrecision, TheBiasPassGivesTheCastTheAmaxItWouldFind) {
  activate_test_device_class();
  for (Geometry g : {GEOMETRIES[0], GEOMETRIES[6]}) {
    for (const bool relu : {false, true}) {
      SCOPED_TRACE(describe(g) + (relu ? " relu" : ""));
      std::mt19937_64 rng(9);
      Geometry plain = g;
      g.bias = true;
      plain.bias = false;
      Conv2dLayer with_bias(desc_of(g), nullptr), without(desc_of(plain), nullptr);
      with_bias.init_parameters(rng);
      std::memcpy(parameters_of(without)[0]->value.data(), parameters_of(with_bias)[0]->value.data(),
                  size_t(parameters_of(with_bias)[0]->value.bytes()));
      Tensor& bias = parameters_of(with_bias)[1]->value;  // zero: the same outputs
      std::memset(bias.data(), 0, size_t(bias.bytes()));
      LayerDesc relu_desc = make_desc("relu", LayerKind::RELU, with_bias.desc().out_shape);
      relu_desc.out_shape = relu_desc.in_shape;
      ReluLayer relu_a(relu_desc, nullptr), relu_b(relu_desc, nullptr);
      if (relu) {
        with_bias.fuse_relu(relu_a);
        without.fuse_relu(relu_b);
      }
      set_layer_precision(with_bias, GetParam());
      set_layer_precision(without, GetParam());
      const Shape out = {g.batch, with_bias.desc().out_shape[0], with_bias.desc().out_shape[1],
                         with_bias.desc().out_shape[2]};
      Tensor x = normal_tensor({g.batch, g.c, g.h, g.w}, rng), dy = normal_tensor(out, rng);
      StepContext ctx_a = device_step_context(), ctx_b = device_step_context();
      Tensor ya = with_bias.forward(x, ctx_a), yb = without.forward(x, ctx_b);
      if (relu) {
        ya = relu_a.forward(ya, ctx_a);
        yb = relu_b.forward(yb, ctx_b);
      }
      ASSERT_EQ(values_of(ya), values_of(yb));
      const Tensor da = relu ? relu_a.backward(dy, ctx_a) : dy, db = relu ? relu_b.backward(dy, ctx_b) : dy;
      EXPECT_EQ(values_of(with_bias.backward(da, ctx_a)), values_of(without.backward(db, ctx_b)));
      EXPECT_EQ(values_of(parameters_of(with_bias)[0]->grad), values_of(parameters_of(without)[0]->grad));
    }
  }
}

}  // namespace
}  // namespace qsync::testing
