// Unit tests for kernels/cpu/conv_onednn.h: forward (also with its ReLU epilogue and mask),
// backward data and backward weights in FP32, BF16 (where the CPU has BF16 dot products) and INT8
// forward and backward data against a naive direct convolution in double, on awkward geometries (odd sizes, stride 2, 1x1, channel counts
// that are not multiples of oneDNN's blocks), and the refusals (what conv_onednn_supports
// declines runs elsewhere). Inputs are multiples of 1/16 in [-2, 2] (exact in BF16) or small
// integers with power-of-two scales, so every sum is exact in FP32: results must match exactly.
// The class is $QSYNC_TEST_DEVICE_CLASS (else the strongest here); tests/kernels/CMakeLists.txt
// runs the file again as cpu-avx2 and cpu-sse41, where INT8 has no VNNI (7-bit weights, doubled).
#include "kernels/cpu/conv_onednn.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/gemm_onednn.h"
#include "kernels/cpu_isa.h"
#include "tests/kernels/test_device_class.h"

namespace qsync {
namespace {

struct Geometry {
  int64_t n, c, h, w, o, k, stride, pad;
};
const Geometry GEOMETRIES[] = {
    {3, 5, 9, 7, 6, 3, 2, 1},    // odd sizes, stride 2
    {2, 3, 8, 8, 16, 1, 1, 0},   // 1x1
    {2, 17, 6, 5, 20, 3, 1, 1},  // channels off the 16-blocks
    {4, 1, 28, 28, 32, 3, 1, 1}, // the zoo CNN's first layer
};

ConvOnednnShape shape_of(const Geometry& g) {
  const int64_t oh = (g.h + 2 * g.pad - g.k) / g.stride + 1, ow = (g.w + 2 * g.pad - g.k) / g.stride + 1;
  return {g.n, g.c, g.h, g.w, g.o, g.k, g.stride, g.pad, oh, ow};
}

std::vector<float> sixteenths(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(-32, 32);
  std::vector<float> v(n);
  for (float& x : v) x = float(d(rng)) / 16.0f;
  return v;
}

std::vector<uint16_t> to_bf16(const std::vector<float>& v) {  // exact for these values
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &v[i], 4);
    out[i] = uint16_t(bits >> 16);
  }
  return out;
}

// The naive convolution: y (N, O, OH, OW) = sum x (N, C, H, W) w (O, C, k, k), and its adjoints.
struct Naive {
  ConvOnednnShape s;
  int64_t x_at(int64_t b, int64_t ci, int64_t yy, int64_t xx) const { return ((b * s.c + ci) * s.h + yy) * s.w + xx; }
  int64_t w_at(int64_t oc, int64_t ci, int64_t ky, int64_t kx) const { return ((oc * s.c + ci) * s.kernel + ky) * s.kernel + kx; }
  int64_t y_at(int64_t b, int64_t oc, int64_t oy, int64_t ox) const { return ((b * s.o + oc) * s.oh + oy) * s.ow + ox; }
  template <class F>
  void each(F f) const {  // f(x index, w index, y index) for every product
    for (int64_t b = 0; b < s.n; ++b)
      for (int64_t oc = 0; oc < s.o; ++oc)
        for (int64_t oy = 0; oy < s.oh; ++oy)
          for (int64_t ox = 0; ox < s.ow; ++ox)
            for (int64_t ci = 0; ci < s.c; ++ci)
              for (int64_t ky = 0; ky < s.kernel; ++ky)
                for (int64_t kx = 0; kx < s.kernel; ++kx) {
                  const int64_t yy = oy * s.stride - s.pad + ky, xx = ox * s.stride - s.pad + kx;
                  if (yy < 0 || yy >= s.h || xx < 0 || xx >= s.w) continue;
                  f(x_at(b, ci, yy, xx), w_at(oc, ci, ky, kx), y_at(b, oc, oy, ox));
                }
  }
};

void expect_equal(const std::vector<float>& got, const std::vector<double>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(double(got[i]), want[i]) << what << " at " << i;
}

// The forward `c` again with the ReLU epilogue, with its mask and without (evaluation): y is the
// ReLU of y_ref (+0, never -0, where y_ref <= 0) and the mask is 1 exactly where y_ref > 0.
void check_relu_epilogue(ConvOnednnCall c, const std::vector<double>& y_ref) {
  size_t positive = 0;
  for (double v : y_ref) positive += v > 0.0;
  ASSERT_GT(positive, 0u);
  ASSERT_LT(positive, y_ref.size()) << "the test needs outputs on both sides of zero";
  std::vector<float> y(y_ref.size(), -3.0f);
  std::vector<uint8_t> mask(y_ref.size(), 7);
  c.relu = true;
  c.out = y.data();
  for (uint8_t* m : {mask.data(), static_cast<uint8_t*>(nullptr)}) {
    std::fill(y.begin(), y.end(), -3.0f);
    std::fill(mask.begin(), mask.end(), uint8_t(7));
    c.relu_mask = m;
    conv_onednn_run(c);
    for (size_t i = 0; i < y.size(); ++i) {
      ASSERT_EQ(double(y[i]), std::max(y_ref[i], 0.0)) << "relu y at " << i;
      ASSERT_FALSE(std::signbit(y[i])) << "relu y at " << i << " is -0";
      if (m != nullptr) {
        ASSERT_EQ(mask[i], y_ref[i] > 0.0 ? 1 : 0) << "relu mask at " << i;
      }
    }
  }
}

// The forward `c` again pooling its outputs over 2x2 windows at stride 2 (conv_onednn_pools), with
// and without the ReLU, its mask and the argmax: the pooled outputs, argmax and mask are those of
// the written outputs (y_ref, or its ReLU) pooled by plain loops, ties (the ReLU's zeros) going to
// the window's first cell in row-major order.
void check_pooled_epilogue(ConvOnednnCall c, const std::vector<double>& y_ref) {
  const ConvOnednnShape& s = c.shape;
  const int64_t hw = s.oh * s.ow, ph = s.oh / 2, pw = s.ow / 2, pooled = s.n * s.o * ph * pw;
  for (const bool relu : {true, false}) {
    std::vector<double> want(size_t(pooled), 0.0);
    std::vector<int32_t> want_index(size_t(pooled), -1);
    for (int64_t plane = 0; plane < s.n * s.o; ++plane)
      for (int64_t i = 0; i < ph * pw; ++i) {
        const int64_t first = 2 * (i / pw) * s.ow + 2 * (i % pw);
        double best = 0;
        int32_t best_index = -1;
        for (const int64_t p : {first, first + 1, first + s.ow, first + s.ow + 1}) {
          const double v = relu ? std::max(y_ref[size_t(plane * hw + p)], 0.0) : y_ref[size_t(plane * hw + p)];
          if (best_index < 0 || v > best) best = v, best_index = int32_t(p);
        }
        want[size_t(plane * ph * pw + i)] = best;
        want_index[size_t(plane * ph * pw + i)] = best_index;
      }
    std::vector<float> y(static_cast<size_t>(pooled));
    std::vector<int32_t> argmax(static_cast<size_t>(pooled));
    std::vector<uint8_t> mask(y_ref.size());
    c.relu = relu;
    c.pool = true;
    c.out = y.data();
    for (const bool outputs : {true, false}) {  // training (mask and argmax), evaluation (neither)
      std::fill(y.begin(), y.end(), -3.0f);
      std::fill(argmax.begin(), argmax.end(), -5);
      std::fill(mask.begin(), mask.end(), uint8_t(7));
      c.relu_mask = relu && outputs ? mask.data() : nullptr;
      c.pool_argmax = outputs ? argmax.data() : nullptr;
      conv_onednn_run(c);
      for (size_t i = 0; i < y.size(); ++i) {
        ASSERT_EQ(double(y[i]), want[i]) << "pooled y at " << i << (relu ? " (relu)" : "");
        if (outputs) {
          ASSERT_EQ(argmax[i], want_index[i]) << "argmax at " << i << (relu ? " (relu)" : "");
        }
      }
      for (size_t i = 0; i < mask.size(); ++i)  // every output's mask, pooled or not (an odd last row or column)
        ASSERT_EQ(mask[i], c.relu_mask == nullptr ? 7 : y_ref[i] > 0.0 ? 1 : 0) << "mask at " << i;
    }
  }
}

// Runs the three ops in `type` (FP32 or BF16) on one geometry and checks them exactly.
void check_float_type(const Geometry& g, Precision type) {
  testing::activate_test_device_class();
  const ConvOnednnShape s = shape_of(g);
  const Naive nv{s};
  const size_t nx = size_t(s.n * s.c * s.h * s.w), nw = size_t(s.o * s.c * s.kernel * s.kernel);
  const size_t ny = size_t(s.n * s.o * s.oh * s.ow);
  const std::vector<float> x = sixteenths(nx, 1), w = sixteenths(nw, 2), dy = sixteenths(ny, 3), bias = sixteenths(size_t(s.o), 4);
  const std::vector<uint16_t> x16 = to_bf16(x), w16 = to_bf16(w), dy16 = to_bf16(dy);
  const bool bf16 = type == Precision::BF16;
  std::vector<double> y_ref(ny), dx_ref(nx, 0.0), dw_ref(nw, 0.0);
  for (size_t i = 0; i < ny; ++i) y_ref[i] = bias[i / size_t(s.oh * s.ow) % size_t(s.o)];
  nv.each([&](int64_t xi, int64_t wi, int64_t yi) {
    y_ref[size_t(yi)] += double(x[size_t(xi)]) * w[size_t(wi)];
    dx_ref[size_t(xi)] += double(dy[size_t(yi)]) * w[size_t(wi)];
    dw_ref[size_t(wi)] += double(dy[size_t(yi)]) * x[size_t(xi)];
  });
  ConvOnednnCall c;
  c.shape = s;
  c.type = type;
  c.op = ConvOnednnOp::FORWARD;
  ASSERT_TRUE(conv_onednn_supports(c)) << "forward " << precision_name(type);
  std::vector<float> y(ny), dx(nx, -7.0f), dw(nw, 0.0f);
  c.x = bf16 ? static_cast<const void*>(x16.data()) : x.data();
  c.w = bf16 ? static_cast<const void*>(w16.data()) : w.data();
  c.bias = bias.data();
  c.out = y.data();
  conv_onednn_run(c);
  expect_equal(y, y_ref, "y");
  check_relu_epilogue(c, y_ref);
  c.op = ConvOnednnOp::BACKWARD_DATA;
  c.dy = bf16 ? static_cast<const void*>(dy16.data()) : dy.data();
  c.out = dx.data();
  ASSERT_TRUE(conv_onednn_supports(c));
  conv_onednn_run(c);
  expect_equal(dx, dx_ref, "dx (written over -7)");
  c.op = ConvOnednnOp::BACKWARD_WEIGHTS;
  c.out = dw.data();
  if (!conv_onednn_supports(c)) {
    // oneDNN has no direct kernel for some BF16 weight gradients (then the caller's im2col path
    // runs the whole backward); the stride-1 3x3 convolutions of the zoo must have one.
    EXPECT_TRUE(bf16 && !(g.k == 3 && g.stride == 1)) << "backward weights " << precision_name(type);
    return;
  }
  conv_onednn_run(c);
  expect_equal(dw, dw_ref, "dw");
  conv_onednn_run(c);  // accumulates
  for (double& v : dw_ref) v *= 2.0;
  expect_equal(dw, dw_ref, "dw += dw");
  // Both backward convolutions at once (dy reordered once): the same results.
  ConvOnednnCall data = c;
  data.op = ConvOnednnOp::BACKWARD_DATA;
  std::vector<float> dx2(nx, 3.0f);
  data.out = dx2.data();
  conv_onednn_run_backward(data, c);
  expect_equal(dx2, dx_ref, "dx (both at once)");
  for (double& v : dw_ref) v *= 1.5;
  expect_equal(dw, dw_ref, "dw += dw (both at once)");
}

TEST(ConvOnednn, Fp32MatchesTheNaiveConvolutionExactly) {
  for (const Geometry& g : GEOMETRIES) check_float_type(g, Precision::FP32);
}

TEST(ConvOnednn, Bf16MatchesTheNaiveConvolutionExactly) {
  testing::activate_test_device_class();
  if (cpu_isa_active() < CpuIsa::AVX512_BF16) {
    ConvOnednnCall c;
    c.shape = shape_of(GEOMETRIES[0]);
    c.type = Precision::BF16;
    EXPECT_FALSE(conv_onednn_supports(c)) << "BF16 without BF16 instructions is a slow emulation: refused";
    GTEST_SKIP() << "this CPU has no AVX512_BF16";
  }
  for (const Geometry& g : GEOMETRIES) check_float_type(g, Precision::BF16);
}

std::vector<int8_t> small_integers(size_t n, int max, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(-max, max);
  std::vector<int8_t> v(n);
  for (int8_t& x : v) x = int8_t(d(rng));
  return v;
}

// The INT8 forward (per-tensor x, per-channel w scales, bias) and backward data (per-tensor dy
// and w) of one geometry. Weights span the class's A range (7-bit without VNNI, where oneDNN gets
// them doubled), x and dy the full [-127, 127]: every product pair is one vpmaddubsw's worst case.
void check_int8(const Geometry& g) {
  const ConvOnednnShape s = shape_of(g);
  const size_t nx = size_t(s.n * s.c * s.h * s.w), nw = size_t(s.o * s.c * s.kernel * s.kernel);
  const size_t ny = size_t(s.n * s.o * s.oh * s.ow);
  const std::vector<int8_t> x = small_integers(nx, 127, 5), w = small_integers(nw, cpu_int8_activation_max(), 6);
  const std::vector<int8_t> dy = small_integers(ny, 127, 7);
  std::vector<float> w_scales(size_t(s.o)), bias(size_t(s.o));
  for (int64_t j = 0; j < s.o; ++j) {
    w_scales[size_t(j)] = std::ldexp(1.0f, -int(j % 5) - 3);
    bias[size_t(j)] = float(j) - 4.5f;
  }
  std::vector<double> sums(ny, 0.0), dx_ref(nx, 0.0);
  Naive{s}.each([&](int64_t xi, int64_t wi, int64_t yi) {
    sums[size_t(yi)] += double(x[size_t(xi)]) * w[size_t(wi)];
    dx_ref[size_t(xi)] += double(dy[size_t(yi)]) * w[size_t(wi)] * 0.25 * 0.125;
  });
  std::vector<double> y_ref(ny);
  const int64_t hw = s.oh * s.ow;
  for (size_t i = 0; i < ny; ++i) {
    const size_t oc = i / size_t(hw) % size_t(s.o);
    y_ref[i] = sums[i] * 0.5 * w_scales[oc] + bias[oc];
  }
  ConvOnednnCall c;
  c.shape = s;
  c.type = Precision::INT8;
  ASSERT_TRUE(conv_onednn_supports(c)) << "forward, " << conv_onednn_impl(c);
  std::vector<float> y(ny), dx(nx, -7.0f);
  c.x = x.data();
  c.w = w.data();
  c.x_scale = 0.5f;
  c.w_scales = w_scales.data();
  c.bias = bias.data();
  c.out = y.data();
  conv_onednn_run(c);
  expect_equal(y, y_ref, "int8 y");
  check_relu_epilogue(c, y_ref);
  if (conv_onednn_pools(c)) {
    check_pooled_epilogue(c, y_ref);
  } else {  // the zoo CNN's layers pool in the output pass
    EXPECT_TRUE(s.oh < 2 || s.ow < 2 || (g.c != 1 && g.c != 40))
        << "no pooling in the output pass, " << conv_onednn_impl(c);
    c.pool = true;
    EXPECT_THROW(conv_onednn_run(c), std::logic_error);
    c.pool = false;
  }
  ConvOnednnCall data;
  data.op = ConvOnednnOp::BACKWARD_DATA;
  data.shape = s;
  data.type = Precision::INT8;
  ASSERT_TRUE(conv_onednn_supports(data)) << "backward data";
  const float w_scale = 0.125f;
  data.w = w.data();
  data.w_scales = &w_scale;
  data.dy = dy.data();
  data.dy_scale = 0.25f;
  data.out = dx.data();
  conv_onednn_run(data);
  expect_equal(dx, dx_ref, "int8 dx (written over -7)");
  data.op = ConvOnednnOp::BACKWARD_WEIGHTS;
  EXPECT_FALSE(conv_onednn_supports(data)) << "oneDNN has no INT8 backward weights";
}

TEST(ConvOnednn, Int8ForwardAndBackwardDataMatchTheNaiveConvolutionExactly) {
  testing::activate_test_device_class();
  for (const Geometry& g : GEOMETRIES) check_int8(g);
}

// INT8 calls run in chunks of samples whose FP32 sums fit 1 MiB: 256 KiB of forward sums a
// sample here (chunks of 4 + 3), 160 KiB of input-gradient sums (6 + 1).
TEST(ConvOnednn, Int8CallsInChunksOfSamplesMatchTheNaiveConvolutionExactly) {
  testing::activate_test_device_class();
  check_int8({7, 40, 32, 32, 64, 3, 1, 1});
}

// With several threads each runs oneDNN alone over its own samples, in runs of at most a chunk:
// 13 samples, 4 a chunk, on 3 threads are 4, 4 and 3 + 2 (forward); at 6 a chunk, 6 and 4 + 3 on
// 2 threads (input gradient). The sums are exact, so any split must give the naive bits.
TEST(ConvOnednn, Int8CallsSplitOverThreadsMatchTheNaiveConvolutionExactly) {
  testing::activate_test_device_class();
  const int threads = omp_get_max_threads();
  omp_set_num_threads(3);
  check_int8({13, 40, 32, 32, 64, 3, 1, 1});
  omp_set_num_threads(threads);
}

TEST(ConvOnednn, Int8WeightsBeyondSevenBitsAreRefusedWithoutVnni) {
  testing::activate_test_device_class();
  if (cpu_isa_active() >= CpuIsa::AVX512) GTEST_SKIP() << "VNNI: 8-bit weights are exact";
  const ConvOnednnShape s = shape_of(GEOMETRIES[0]);
  const std::vector<int8_t> x(size_t(s.n * s.c * s.h * s.w), 1);
  std::vector<int8_t> w(size_t(s.o * s.c * s.kernel * s.kernel), 1);
  w[3] = 64;  // one weight past the 7-bit range
  const std::vector<float> w_scales(size_t(s.o), 1.0f);
  std::vector<float> y(size_t(s.n * s.o * s.oh * s.ow));
  ConvOnednnCall c;
  c.shape = s;
  c.type = Precision::INT8;
  c.x = x.data();
  c.w = w.data();
  c.w_scales = w_scales.data();
  c.out = y.data();
  try {
    conv_onednn_run(c);
    ADD_FAILURE() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("cpu_int8_activation_max"), std::string::npos) << e.what();
  }
  ConvOnednnCall data;  // the input gradient takes the same weights
  data.op = ConvOnednnOp::BACKWARD_DATA;
  data.shape = s;
  data.type = Precision::INT8;
  const float w_scale = 1.0f;
  const std::vector<int8_t> dy(size_t(s.n * s.o * s.oh * s.ow), 1);
  std::vector<float> dx(x.size());
  data.w = w.data();
  data.w_scales = &w_scale;
  data.dy = dy.data();
  data.out = dx.data();
  EXPECT_THROW(conv_onednn_run(data), std::invalid_argument);
}

TEST(ConvOnednn, RefusedCallsThrowNamingTheFallback) {
  testing::activate_test_device_class();
  ConvOnednnCall c;
  c.shape = shape_of(GEOMETRIES[0]);
  c.type = Precision::FP16;
  EXPECT_FALSE(conv_onednn_supports(c));
  try {
    conv_onednn_run(c);
    ADD_FAILURE() << "expected an error";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("im2col"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace qsync
