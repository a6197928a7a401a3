// File: tests/worker/ops/cpu_ops_test.cpp
// The host implementation of the op interface beyond what the layer tests cover: the canonical
// sum of squares (the global norm every rank computes alike), the matmul options (bias epilogue,
// row sums of op(A)), GELU's saved derivative and its vector paths, quantization into the
// transposed layout, dequantization and 16-bit rounding in parallel chunks, the loss-scale path
// of the optimizer (unscaling, skipping a non-finite step), dynamic loss scaling's schedule, and
// max pooling's vector rows against its plain ones.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu_isa.h"
#include "kernels/float_convert.h"
#include "tests/kernels/isa_levels.h"
#include "worker/loss_scale.h"
#include "worker/ops/cpu/cpu_kernels.h"
#include "worker/ops/cpu/vector_math.h"
#include "worker/ops/cpu_ops.h"
#include "worker/optimizer.h"

namespace qsync {
namespace {

Tensor host(const std::vector<float>& v, const Shape& s) {
  Tensor t = Tensor::empty(s, Precision::FP32, nullptr);
  for (size_t i = 0; i < v.size(); ++i) t.f32()[i] = v[i];
  return t;
}

std::vector<float> normal(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// The tree is the definition: one block is halving order; several blocks add the block sums by
// the same tree. Every square is exact, so small inputs are exact, and any input is within a few
// ulp (log2(n) additions per path) of the exact sum.
TEST(CanonicalSumOfSquares, FollowsTheDefinedTree) {
  EXPECT_EQ(canonical_sum_of_squares(nullptr, 0), 0.0);
  const std::vector<float> small = {1.0f, 2.0f, 3.0f};
  EXPECT_EQ(canonical_sum_of_squares(small.data(), 3), 14.0);
  for (int64_t n : {int64_t(1), int64_t(2047), int64_t(2048), int64_t(2049), int64_t(5000), int64_t(2048 * 2048 + 3)}) {
    const std::vector<float> g = normal(size_t(n), uint32_t(n));
    long double exact = 0;
    for (float v : g) exact += (long double)v * (long double)v;
    const double got = canonical_sum_of_squares(g.data(), n);
    EXPECT_NEAR(got, double(exact), double(exact) * 1e-14) << n;
    // One block: exactly the halving tree written out.
    if (n <= CANONICAL_SUM_BLOCK) {
      std::vector<double> v(size_t(CANONICAL_SUM_BLOCK), 0.0);
      for (int64_t i = 0; i < n; ++i) v[size_t(i)] = double(g[size_t(i)]) * double(g[size_t(i)]);
      for (int64_t half = CANONICAL_SUM_BLOCK / 2; half >= 1; half /= 2)
        for (int64_t i = 0; i < half; ++i) v[size_t(i)] += v[size_t(i + half)];
      EXPECT_EQ(got, v[0]) << n;
    }
  }
}

TEST(CpuOps, MatmulBiasAndRowSumsOfA) {
  DeviceOps& ops = cpu_ops();
  const int64_t m = 5, n = 3, k = 4;
  const auto av = normal(size_t(k * m), 1), bv = normal(size_t(k * n), 2);
  const Tensor a = host(av, {k, m}), b = host(bv, {k, n});  // op(a) = a^T (m, k), op(b) = b (k, n)
  Tensor bias = host({1.0f, -2.0f, 0.5f}, {n});
  Tensor c = Tensor::zeros({m, n}, Precision::FP32, nullptr);
  Tensor sums = host(std::vector<float>(size_t(m), 10.0f), {m});
  MatmulOptions o;
  o.bias = &bias;
  ops.matmul(a, Transpose::YES, b, Transpose::NO, c, o);
  MatmulOptions rs;
  rs.row_sums_of_a = &sums;
  rs.beta = 1.0f;
  Tensor c2 = Tensor::zeros({m, n}, Precision::FP32, nullptr);
  ops.matmul(a, Transpose::YES, b, Transpose::NO, c2, rs);
  for (int64_t i = 0; i < m; ++i) {
    double row = 10.0;
    for (int64_t p = 0; p < k; ++p) row += av[size_t(p * m + i)];
    EXPECT_NEAR(sums.f32()[i], row, 1e-5) << i;
    for (int64_t j = 0; j < n; ++j) {
      double ref = 0;
      for (int64_t p = 0; p < k; ++p) ref += double(av[size_t(p * m + i)]) * bv[size_t(p * n + j)];
      EXPECT_NEAR(c.f32()[i * n + j], ref + bias.f32()[j], 1e-5) << i << ", " << j;
      EXPECT_NEAR(c2.f32()[i * n + j], ref, 1e-5) << i << ", " << j;
    }
  }
}

// The row sums a GEMM adds for the bias gradient (row_sums_of_a), bit for bit at 1, 2 and 3
// threads: op(a) = a^T (the linear layer's weight gradient, dy^T x) as the column sums of the
// stored a in kernels/column_sum_order.h's order (add_column_sums_ref), over widths under, at and
// past a block of 16 columns; op(a) = a (a device that keeps dy transposed), each row in its
// stored order; past the size below which they stay on one thread.
TEST(CpuOps, MatmulRowSumsOfAFollowTheColumnSumOrderAtAnyThreadCount) {
  DeviceOps& ops = cpu_ops();
  const int default_threads = omp_get_max_threads();
  for (const bool transposed : {true, false}) {
    for (const int64_t m : {int64_t{1}, int64_t{16}, int64_t{17}, int64_t{200}}) {
      const int64_t k = (1 << 17) / m + 3, n = 2;
      const auto av = normal(size_t(k * m), uint32_t(m)), bv = normal(size_t(k * n), 7);
      const Tensor a = transposed ? host(av, {k, m}) : host(av, {m, k});
      const Tensor b = host(bv, {k, n});
      std::vector<float> start = normal(size_t(m), 9), want = start;
      if (transposed) {
        add_column_sums_ref(av.data(), k, m, want.data());
      } else {
        for (int64_t i = 0; i < m; ++i)
          for (int64_t p = 0; p < k; ++p) want[size_t(i)] += av[size_t(i * k + p)];
      }
      for (const int threads : {1, 2, 3}) {
        omp_set_num_threads(threads);
        Tensor sums = host(start, {m});
        Tensor c = Tensor::zeros({m, n}, Precision::FP32, nullptr);
        MatmulOptions o;
        o.row_sums_of_a = &sums;
        ops.matmul(a, transposed ? Transpose::YES : Transpose::NO, b, Transpose::NO, c, o);
        EXPECT_EQ(0, std::memcmp(sums.f32(), want.data(), size_t(m) * sizeof(float)))
            << "m=" << m << (transposed ? ", a^T, " : ", a, ") << threads << " threads";
      }
    }
  }
  omp_set_num_threads(default_threads);
}

// GELU and the derivative its training forward saves, against the formulas in double (Phi from
// erfc, so the negative tail is exact too), on sizes with and without a vector tail and one over
// the threading threshold; the forward without the derivative writes the same y bit for bit.
// Tolerance: the erfc polynomial, exp and the products round to about 4e-7 relative in y
// (measured 3.8e-7 over [-14, 14]) and 2e-7 absolute in the derivative (measured 1.7e-7), plus
// 1e-38 where Phi is flushed to 0 past |x| = 13.
TEST(CpuOps, GeluForwardSavesItsDerivative) {
  DeviceOps& ops = cpu_ops();
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{8}, int64_t{1029}, int64_t{3} << 14}) {
    std::vector<float> v = normal(size_t(n), uint32_t(n));
    for (float& e : v) e *= 4.0f;  // reach the tails (|x| up to ~16)
    const Tensor x = host(v, {n});
    Tensor y = Tensor::empty({n}, Precision::FP32, nullptr), d = y.clone(nullptr), y_eval = y.clone(nullptr);
    ops.gelu_forward(x, y, &d);
    ops.gelu_forward(x, y_eval, nullptr);
    const Tensor dy = host(normal(size_t(n), 99), {n});
    Tensor dx = y.clone(nullptr);
    ops.gelu_backward(d, dy, dx);
    for (int64_t i = 0; i < n; ++i) {
      const double a = v[size_t(i)], cdf = 0.5 * std::erfc(-a / std::sqrt(2.0));
      const double want_d = cdf + a * std::exp(-0.5 * a * a) / std::sqrt(2.0 * M_PI);
      EXPECT_NEAR(y.f32()[i], a * cdf, 4e-7 * std::fabs(a * cdf) + 1e-37) << n << " " << i;
      EXPECT_NEAR(d.f32()[i], want_d, 2e-7) << n << " " << i;
      EXPECT_EQ(dx.f32()[i], dy.f32()[i] * d.f32()[i]);
      ASSERT_EQ(y.f32()[i], y_eval.f32()[i]) << n << " " << i;
    }
  }
}

// The vector GELU gives the scalar reference's bits at every ISA level: ordinary values, the
// tails around the |x| = 13 clamp, zeros of both signs, infinities and NaN, at lengths with and
// without a vector tail, in place too.
TEST(CpuOps, GeluVectorMatchesItsReferenceBitExact) {
  std::vector<float> v = normal(4099, 7);
  for (float& e : v) e *= 5.0f;
  for (float s : {0.0f, -0.0f, 12.999f, 13.0f, 13.001f, -12.999f, -13.0f, -13.001f, -40.0f, 1e-30f, -1e-30f,
                  std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::quiet_NaN()})
    v.push_back(s);
  const int64_t total = int64_t(v.size());
  for (CpuIsa isa : {CpuIsa::SCALAR, CpuIsa::AVX2, CpuIsa::AVX512}) {
    if (cpu_isa_detected() < isa) continue;
    testing::IsaCap cap(isa);
    for (int64_t n : {int64_t{1}, int64_t{15}, int64_t{17}, total}) {
      SCOPED_TRACE(std::string(cpu_isa_name(isa)) + " n = " + std::to_string(n));
      const float* x = v.data() + (total - n);  // the special values are at the end
      const size_t count = size_t(n);
      std::vector<float> y(count), d(count), y_ref(count), d_ref(count), in_place(x, x + n);
      gelu_buffer(x, y.data(), d.data(), n);
      gelu_buffer_ref(x, y_ref.data(), d_ref.data(), n);
      gelu_buffer(in_place.data(), in_place.data(), nullptr, n);
      ASSERT_EQ(0, std::memcmp(y.data(), y_ref.data(), size_t(n) * sizeof(float)));
      ASSERT_EQ(0, std::memcmp(d.data(), d_ref.data(), size_t(n) * sizeof(float)));
      ASSERT_EQ(0, std::memcmp(in_place.data(), y_ref.data(), size_t(n) * sizeof(float)));
    }
  }
  // The tails: Phi flushed past |x| = 13, the derivative there Phi itself.
  float y = 0, d = 0;
  const float minus_big = -20.0f, plus_big = 20.0f;
  gelu_buffer_ref(&minus_big, &y, &d, 1);
  EXPECT_EQ(y, 0.0f);
  EXPECT_EQ(d, 0.0f);
  gelu_buffer_ref(&plus_big, &y, &d, 1);
  EXPECT_EQ(y, 20.0f);
  EXPECT_EQ(d, 1.0f);
}

// The transposed copy holds the transposed values with the same scale (one amax pass).
TEST(CpuOps, QuantizeIntoTheTransposedLayout) {
  DeviceOps& ops = cpu_ops();
  const int64_t rows = 7, cols = 5;
  const Tensor x = host(normal(size_t(rows * cols), 3), {rows, cols});
  for (Precision p : {Precision::INT8, Precision::FP8_E4M3, Precision::FP8_E5M2}) {
    Tensor q = Tensor::empty({rows, cols}, p, nullptr), qt = Tensor::empty({cols, rows}, p, nullptr);
    if (p == Precision::INT8) {
      Int8Quantization spec;
      spec.rounding = Rounding::STOCHASTIC;
      spec.seed = 9;
      ops.quantize_int8(x, spec, q, &qt);
    } else {
      ops.quantize_fp8(x, q, &qt);
    }
    ASSERT_EQ(q.scale_mode, ScaleMode::PER_TENSOR);
    EXPECT_EQ(qt.scale_data()[0], q.scale_data()[0]);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) EXPECT_EQ(qt.as<uint8_t>()[c * rows + r], q.as<uint8_t>()[r * cols + c]);
  }
}

uint32_t bits_of(float v) {
  uint32_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}

// INT8 -> FP32 (rounded to a 16-bit grid or not), FP16 and BF16, and FP32 rounded in place: the
// paths of the classes without native BF16 run through FP32 buffers in parallel chunks. Per
// tensor and per row, rows past one chunk and not a multiple of it, a scale whose products are
// subnormal; each value against the scalar oracles (q * scale, then the _ref encoders), at 1
// and 2 threads.
TEST(CpuOps, DequantizeAndRoundMatchTheScalarOraclesAtAnyThreadCount) {
  DeviceOps& ops = cpu_ops();
  const int default_threads = omp_get_max_threads();
  struct Case {
    int64_t rows, cols;
    bool per_row;
  };
  for (const Case c : {Case{1, 100003, false}, Case{3, 70001, true}, Case{257, 301, true}}) {
    const int64_t n = c.rows * c.cols;
    Tensor q = Tensor::empty({c.rows, c.cols}, Precision::INT8, nullptr);
    std::mt19937 rng(static_cast<uint32_t>(n));
    for (int64_t i = 0; i < n; ++i) q.as<int8_t>()[i] = static_cast<int8_t>(int(rng() % 255) - 127);
    std::vector<float> scales(size_t(c.per_row ? c.rows : 1));
    for (size_t k = 0; k < scales.size(); ++k) scales[k] = k == 1 ? 3e-41f : 0.0137f * float(k + 1);
    q.scale_mode = c.per_row ? ScaleMode::PER_CHANNEL : ScaleMode::PER_TENSOR;
    q.scales = Tensor::host_scales(scales);
    auto value = [&](int64_t i) { return float(q.as<int8_t>()[i]) * scales[size_t(c.per_row ? i / c.cols : 0)]; };
    for (const int threads : {1, 2}) {
      omp_set_num_threads(threads);
      SCOPED_TRACE(std::to_string(c.rows) + "x" + std::to_string(c.cols) + (c.per_row ? " per row, " : " per tensor, ") +
                   std::to_string(threads) + " threads");
      for (const Precision round_to : {Precision::FP32, Precision::BF16, Precision::FP16}) {
        Tensor out = Tensor::empty(q.shape(), Precision::FP32, nullptr);
        ops.dequantize_int8(q, out, round_to);
        for (int64_t i = 0; i < n; ++i) {
          const float v = value(i);
          const float want = round_to == Precision::BF16   ? bf16_to_fp32_ref(fp32_to_bf16_ref(v))
                             : round_to == Precision::FP16 ? fp16_to_fp32_ref(fp32_to_fp16_ref(v))
                                                           : v;
          ASSERT_EQ(bits_of(out.f32()[i]), bits_of(want)) << "round to " << precision_name(round_to) << " at " << i;
        }
      }
      Tensor h = Tensor::empty(q.shape(), Precision::FP16, nullptr), b = Tensor::empty(q.shape(), Precision::BF16, nullptr);
      ops.dequantize_int8(q, h, Precision::FP16);
      ops.dequantize_int8(q, b, Precision::BF16);
      Tensor rounded = Tensor::empty(q.shape(), Precision::FP32, nullptr);
      for (int64_t i = 0; i < n; ++i) rounded.f32()[i] = value(i) * 1.1f;  // off the INT8 grid
      ops.round_to_sixteen_bit(rounded, Precision::BF16);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(h.as<uint16_t>()[i], fp32_to_fp16_ref(value(i))) << "FP16 at " << i;
        ASSERT_EQ(b.as<uint16_t>()[i], fp32_to_bf16_ref(value(i))) << "BF16 at " << i;
        ASSERT_EQ(bits_of(rounded.f32()[i]), bits_of(bf16_to_fp32_ref(fp32_to_bf16_ref(value(i) * 1.1f)))) << i;
      }
    }
  }
  omp_set_num_threads(default_threads);
}

// The bias gradient sums each column in kernels/column_sum_order.h's order (add_column_sums_ref) at
// any thread count: widths under, at and past a block of 16 columns and not a multiple of 16,
// with rows in many chunks (one not full) and, at 2000 columns, in one (summed in place, the
// threads over columns); bit for bit at 1, 2 and 3 threads, added to what db held.
TEST(CpuOps, BiasGradRowsFollowsTheColumnSumOrderAtAnyThreadCount) {
  DeviceOps& ops = cpu_ops();
  const int default_threads = omp_get_max_threads();
  for (const int64_t n : {int64_t{1}, int64_t{16}, int64_t{17}, int64_t{64}, int64_t{200}, int64_t{2000}}) {
    const int64_t m = (1 << 17) / n + 3;  // past the size below which it stays on one thread
    Tensor dy = Tensor::empty({m, n}, Precision::FP32, nullptr);
    std::mt19937 rng(static_cast<uint32_t>(n));
    std::normal_distribution<float> dist;
    for (int64_t i = 0; i < m * n; ++i) dy.f32()[i] = dist(rng);
    std::vector<float> start(static_cast<size_t>(n)), want(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) want[size_t(j)] = start[size_t(j)] = dist(rng);
    add_column_sums_ref(dy.f32(), m, n, want.data());
    for (const int threads : {1, 2, 3}) {
      omp_set_num_threads(threads);
      Tensor db = Tensor::empty({n}, Precision::FP32, nullptr);
      std::memcpy(db.f32(), start.data(), size_t(n) * sizeof(float));
      ops.bias_grad_rows(dy, db);
      EXPECT_EQ(0, std::memcmp(db.f32(), want.data(), size_t(n) * sizeof(float)))
          << "n=" << n << ", " << threads << " threads";
    }
  }
  omp_set_num_threads(default_threads);
}

// Max pooling's 2x2 windows eight at a time (maxpool_2x2 with vectors) against the plain row loop:
// the same outputs bit for bit and the same argmax, on planes whose output rows take whole
// vectors (28 -> 14: one of 8 and a masked 6), only masked ones (14 -> 7; 9 -> 4 with an odd
// column left out) and more than two vectors (34 -> 17), an odd row left out (7 and 5 rows);
// values from a small set (ties), -0 and +0, and NaNs (a NaN wins its window; the first wins).
TEST(CpuOps, MaxPool2x2VectorsGiveThePlainLoopsBits) {
  if (cpu_isa_detected() < CpuIsa::AVX2) GTEST_SKIP() << "no AVX2";
  struct Planes {
    int64_t n, h, w;
  };
  std::mt19937_64 rng(12);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float values[] = {-1.5f, -0.0f, 0.0f, 0.25f, 2.0f, 3.0f, nan};
  for (const Planes& p : {Planes{3, 28, 28}, Planes{5, 14, 14}, Planes{2, 7, 9}, Planes{4, 2, 34}, Planes{1, 5, 31}}) {
    SCOPED_TRACE(std::to_string(p.n) + " planes " + std::to_string(p.h) + " x " + std::to_string(p.w));
    const int64_t ho = p.h / 2, wo = p.w / 2;
    std::vector<float> x(size_t(p.n * p.h * p.w));
    for (float& v : x) v = values[rng() % 13 % 7];  // NaN 1 in 13
    std::vector<float> y_plain(size_t(p.n * ho * wo)), y_vec(y_plain.size());
    std::vector<int32_t> a_plain(y_plain.size()), a_vec(y_plain.size(), -7);
    maxpool_2x2(x.data(), p.n, p.h, p.w, ho, wo, y_plain.data(), a_plain.data(), false);
    maxpool_2x2(x.data(), p.n, p.h, p.w, ho, wo, y_vec.data(), a_vec.data(), true);
    ASSERT_EQ(0, std::memcmp(y_plain.data(), y_vec.data(), y_plain.size() * sizeof(float)));
    ASSERT_EQ(a_plain, a_vec);
    EXPECT_GT(std::count_if(y_plain.begin(), y_plain.end(), [](float v) { return v != v; }), 0) << "no NaN won";
  }
}

// With a loss scale S = 2^k the gradients carry S; the update unscales them exactly, so the
// weights equal those of the unscaled step; a non-finite gradient skips the whole update.
TEST(CpuOps, OptimizerUnscalesAndSkipsNonFiniteSteps) {
  for (bool adamw : {true, false}) {
    Parameter a, b;
    a.name = "a";
    a.value = host({0.5f, -0.25f, 1.0f}, {3});
    a.grad = host({0.1f, -0.2f, 0.3f}, {3});
    b.name = "b";
    b.value = a.value.clone(nullptr);
    b.grad = host({0.1f * 1024, -0.2f * 1024, 0.3f * 1024}, {3});
    OptimizerConfig oc;
    oc.kind = adamw ? OptimizerKind::ADAMW : OptimizerKind::SGD;
    oc.grad_clip = 0.1;  // the clip factor comes from the unscaled norm
    Optimizer plain(oc, {&a}, nullptr), scaled(oc, {&b}, nullptr);
    plain.step(0);
    scaled.step(0, 1.0f / 1024, true);
    scaled.settle();
    EXPECT_FALSE(scaled.last_result().skipped);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(a.value.f32()[i], b.value.f32()[i]) << i;
    b.grad.f32()[1] = std::numeric_limits<float>::infinity();
    const std::vector<float> before(b.value.f32(), b.value.f32() + 3);
    scaled.step(1, 1.0f / 1024, true);
    scaled.settle();
    EXPECT_TRUE(scaled.last_result().skipped);
    EXPECT_EQ(scaled.updates_applied(), 1) << "a skipped step is not counted";
    for (int i = 0; i < 3; ++i) EXPECT_EQ(b.value.f32()[i], before[size_t(i)]) << i;
  }
}

TEST(LossScaler, HalvesOnOverflowAndDoublesAfterCleanSteps) {
  LossScaler none;
  EXPECT_FALSE(none.enabled());
  EXPECT_EQ(none.scale(), 1.0f);
  LossScaler s(LossScaling::DYNAMIC);
  EXPECT_EQ(s.scale(), 65536.0f);
  s.update(true);
  EXPECT_EQ(s.scale(), 32768.0f);
  for (int64_t i = 0; i < LossScaler::GROWTH_INTERVAL - 1; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 32768.0f);
  s.update(false);
  EXPECT_EQ(s.scale(), 65536.0f);
  EXPECT_EQ(s.state().clean_steps, 0);
  EXPECT_EQ(s.inverse(), 1.0f / 65536.0f);
}

}  // namespace
}  // namespace qsync
