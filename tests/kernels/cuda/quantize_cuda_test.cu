// File: tests/kernels/cuda/quantize_cuda_test.cu
// The CUDA quantizers and converters against the CPU `_ref` functions, bit for bit: amax (per
// tensor, per row), the INT8 scale, INT8 quantize (RNE and stochastic, per tensor and per row),
// dequantize, and FP32 <-> FP16/BF16/E4M3/E5M2. The host twins of the device code run without
// a GPU; everything else skips when cuda_device_count() == 0.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/quantize_cuda.h"
#include "kernels/float_convert.h"
#include "kernels/quantize.h"

namespace qsync {
namespace {

#define REQUIRE_CUDA_DEVICE() \
  if (qsync::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device"

uint32_t bits_of(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  return u;
}
float float_of(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof(x));
  return x;
}

// Inputs for the FP32 -> narrow encoders: specials, every format's boundaries and the midpoints
// between neighbouring codes (the ties of round-to-nearest-even), a strided sweep over all bit
// patterns, and random patterns.
std::vector<float> encoder_inputs() {
  std::vector<float> x = {0.0f, -0.0f, 1e-45f, -1e-40f, 0x1p-10f, 0x1p-9f, 0x1p-17f, 0x1p-16f, 1.17549435e-38f,
                          1.0f, 1.5f, -2.5f, 448.0f, 464.0f, 480.0f, 57344.0f, 61440.0f, 65504.0f, 65520.0f,
                          65536.0f, 3.38953139e38f, 3.4e38f, std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                          float_of(0x7fc00000u), float_of(0x7f800001u), float_of(0xffc00001u),
                          float_of(0x7fe00000u), float_of(0xff812345u)};
  for (uint32_t h = 0; h < 0xffffu; ++h) {
    x.push_back(0.5f * (fp16_to_fp32_ref(uint16_t(h)) + fp16_to_fp32_ref(uint16_t(h + 1))));
    const uint32_t b = uint32_t(h) << 16;
    x.push_back(float_of(b | 0x8000u));  // bf16 tie
    x.push_back(float_of(b | 0x7fffu));
    x.push_back(float_of(b | 0x8001u));
  }
  for (uint32_t v = 0; v < 0xffu; ++v) {
    x.push_back(0.5f * (e4m3_to_fp32_ref(uint8_t(v)) + e4m3_to_fp32_ref(uint8_t(v + 1))));
    x.push_back(0.5f * (e5m2_to_fp32_ref(uint8_t(v)) + e5m2_to_fp32_ref(uint8_t(v + 1))));
  }
  for (uint64_t u = 0; u < (uint64_t(1) << 32); u += 65521) x.push_back(float_of(uint32_t(u)));
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i) x.push_back(float_of(rng()));
  return x;
}

template <typename T>
std::vector<T> all_patterns(uint32_t count) {
  std::vector<T> v(count);
  for (uint32_t i = 0; i < count; ++i) v[i] = T(i);
  return v;
}

// ------------------------------------------------------------------------------------------
// Without a GPU: the host twins of the device code.

TEST(CudaQuantizeHostTwin, StochasticNoiseIsTheCpuNoise) {
  for (uint64_t seed : {uint64_t(0), uint64_t(1), uint64_t(42), uint64_t(0x8000000000000005ull), ~uint64_t(0)})
    for (uint64_t i = 0; i < 20000; ++i) {
      const uint64_t index = i < 10000 ? i : ~uint64_t(0) - i;  // small and huge indices
      ASSERT_EQ(bits_of(stochastic_uniform_cuda_twin(seed, index)), bits_of(stochastic_uniform(seed, index)))
          << "seed " << seed << " index " << index;
    }
}

TEST(CudaQuantizeHostTwin, ConvertersMatchRefBitExactly) {
  for (uint32_t h = 0; h <= 0xffffu; ++h) {
    ASSERT_EQ(bits_of(fp16_to_fp32_cuda_twin(uint16_t(h))), bits_of(fp16_to_fp32_ref(uint16_t(h)))) << h;
    ASSERT_EQ(bits_of(bf16_to_fp32_cuda_twin(uint16_t(h))), bits_of(bf16_to_fp32_ref(uint16_t(h)))) << h;
  }
  for (uint32_t v = 0; v <= 0xffu; ++v) {
    ASSERT_EQ(bits_of(e4m3_to_fp32_cuda_twin(uint8_t(v))), bits_of(e4m3_to_fp32_ref(uint8_t(v)))) << v;
    ASSERT_EQ(bits_of(e5m2_to_fp32_cuda_twin(uint8_t(v))), bits_of(e5m2_to_fp32_ref(uint8_t(v)))) << v;
  }
  for (float x : encoder_inputs()) {
    ASSERT_EQ(fp32_to_fp16_cuda_twin(x), fp32_to_fp16_ref(x)) << std::hex << bits_of(x);
    ASSERT_EQ(fp32_to_bf16_cuda_twin(x), fp32_to_bf16_ref(x)) << std::hex << bits_of(x);
    ASSERT_EQ(fp32_to_e4m3_cuda_twin(x), fp32_to_e4m3_ref(x)) << std::hex << bits_of(x);
    ASSERT_EQ(fp32_to_e5m2_cuda_twin(x), fp32_to_e5m2_ref(x)) << std::hex << bits_of(x);
  }
}

// ------------------------------------------------------------------------------------------
// On a GPU.

CudaBuffer device_scalar(float v) { return CudaBuffer::from_vector(std::vector<float>{v}); }

// Values for amax and quantize: N(0, sigma) with NaN, +-inf and exact ties sprinkled in.
std::vector<float> test_values(int64_t n, uint32_t seed, bool specials) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = dist(rng);
  if (specials && n >= 8) {
    x[size_t(n / 2)] = std::numeric_limits<float>::quiet_NaN();
    x[size_t(n / 3)] = 2.5f;   // ties once divided by scales like 1 or 0.5
    x[size_t(n / 5)] = -0.5f;
    x[size_t(n - 1)] = -1e30f;  // saturates
  }
  return x;
}

const int64_t SIZES[] = {0, 1, 3, 31, 255, 256, 257, 1000, 65537, (int64_t(1) << 20) + 3};

TEST(CudaQuantize, AmaxMatchesRef) {
  REQUIRE_CUDA_DEVICE();
  uint32_t seed = 1;
  for (int64_t n : SIZES)
    for (bool specials : {false, true}) {
      std::vector<float> x = test_values(n, seed++, specials);
      CudaBuffer dx = CudaBuffer::from_vector(x), out = device_scalar(-1.0f);
      amax_cuda(dx.as<float>(), n, out.as<float>(), nullptr);
      EXPECT_EQ(bits_of(out.download_vector<float>(1)[0]), bits_of(amax_ref(x.data(), n))) << "n " << n;
    }
  std::vector<float> inf = {1.0f, -std::numeric_limits<float>::infinity(), std::nanf("")};
  CudaBuffer dx = CudaBuffer::from_vector(inf), out = device_scalar(0.0f);
  amax_cuda(dx.as<float>(), 3, out.as<float>(), nullptr);
  EXPECT_EQ(out.download_vector<float>(1)[0], std::numeric_limits<float>::infinity());
}

TEST(CudaQuantize, AmaxRowsMatchesRef) {
  REQUIRE_CUDA_DEVICE();
  const std::pair<int64_t, int64_t> shapes[] = {{1, 1}, {3, 7}, {17, 1000}, {300, 3}, {1, 70000}, {70000, 2}, {5, 0}};
  uint32_t seed = 10;
  for (auto [rows, cols] : shapes) {
    std::vector<float> x = test_values(rows * cols, seed++, true);
    CudaBuffer dx = CudaBuffer::from_vector(x), out(size_t(rows) * sizeof(float));
    amax_rows_cuda(dx.as<float>(), rows, cols, out.as<float>(), nullptr);
    std::vector<float> expect(static_cast<size_t>(rows));
    amax_rows_ref(x.data(), rows, cols, expect.data());
    const std::vector<float> got = out.download_vector<float>(size_t(rows));
    for (int64_t r = 0; r < rows; ++r)
      ASSERT_EQ(bits_of(got[size_t(r)]), bits_of(expect[size_t(r)])) << rows << "x" << cols << " row " << r;
  }
}

TEST(CudaQuantize, Int8ScaleFromAmaxMatchesCpu) {
  REQUIRE_CUDA_DEVICE();
  const std::vector<float> amax = {0.0f, 1e-40f, 1e-20f, 0.3f, 1.0f, 127.0f, 3e38f, std::numeric_limits<float>::infinity()};
  CudaBuffer da = CudaBuffer::from_vector(amax), ds(amax.size() * sizeof(float));
  int8_scale_from_amax_cuda(da.as<float>(), ds.as<float>(), int64_t(amax.size()), nullptr);
  const std::vector<float> got = ds.download_vector<float>(amax.size());
  for (size_t i = 0; i < amax.size(); ++i) EXPECT_EQ(bits_of(got[i]), bits_of(int8_scale_from_amax(amax[i]))) << amax[i];
}

TEST(CudaQuantize, Int8PerTensorMatchesRefBitExactly) {
  REQUIRE_CUDA_DEVICE();
  uint32_t seed = 20;
  for (int64_t n : SIZES)
    for (float scale : {1.0f, 0.5f, 0.0371f, int8_scale_from_amax(9.0f)})
      for (Rounding r : {Rounding::NEAREST_EVEN, Rounding::STOCHASTIC})
        for (uint64_t noise_seed : {uint64_t(0), uint64_t(0x9e3779b97f4a7c15ull)}) {
          if (r == Rounding::NEAREST_EVEN && noise_seed != 0) continue;
          const std::vector<float> x = test_values(n, seed++, true);
          CudaBuffer dx = CudaBuffer::from_vector(x), dq(static_cast<size_t>(n)), ds = device_scalar(scale);
          quantize_int8_cuda(dx.as<float>(), dq.as<int8_t>(), n, ds.as<float>(), r, noise_seed, nullptr);
          std::vector<int8_t> expect(static_cast<size_t>(n));
          quantize_int8_ref(x.data(), expect.data(), n, scale, r, noise_seed);
          const std::vector<int8_t> got = dq.download_vector<int8_t>(size_t(n));
          for (int64_t i = 0; i < n; ++i)
            ASSERT_EQ(int(got[size_t(i)]), int(expect[size_t(i)]))
                << "n " << n << " scale " << scale << " rounding " << int(r) << " seed " << noise_seed << " i " << i
                << " x " << x[size_t(i)];
        }
}

TEST(CudaQuantize, Int8PerRowMatchesRefBitExactly) {
  REQUIRE_CUDA_DEVICE();
  const std::pair<int64_t, int64_t> shapes[] = {{1, 1}, {3, 7}, {17, 1000}, {300, 3}, {64, 4096}};
  uint32_t seed = 40;
  for (auto [rows, cols] : shapes)
    for (Rounding r : {Rounding::NEAREST_EVEN, Rounding::STOCHASTIC}) {
      const std::vector<float> x = test_values(rows * cols, seed++, true);
      std::vector<float> amax(static_cast<size_t>(rows)), scales(static_cast<size_t>(rows));
      amax_rows_ref(x.data(), rows, cols, amax.data());
      for (int64_t i = 0; i < rows; ++i) scales[size_t(i)] = int8_scale_from_amax(amax[size_t(i)]);
      CudaBuffer dx = CudaBuffer::from_vector(x), dq(size_t(rows * cols)), ds = CudaBuffer::from_vector(scales);
      quantize_int8_rows_cuda(dx.as<float>(), dq.as<int8_t>(), rows, cols, ds.as<float>(), r, 1234, nullptr);
      std::vector<int8_t> expect(size_t(rows * cols));
      quantize_int8_rows_ref(x.data(), expect.data(), rows, cols, scales.data(), r, 1234);
      const std::vector<int8_t> got = dq.download_vector<int8_t>(size_t(rows * cols));
      for (int64_t i = 0; i < rows * cols; ++i)
        ASSERT_EQ(int(got[size_t(i)]), int(expect[size_t(i)])) << rows << "x" << cols << " rounding " << int(r) << " i " << i;
    }
}

TEST(CudaQuantize, DequantizeMatchesRefBitExactly) {
  REQUIRE_CUDA_DEVICE();
  std::vector<int8_t> q(256);
  for (int i = 0; i < 256; ++i) q[size_t(i)] = int8_t(i - 128);
  for (float scale : {1.0f, 0.0371f, 3e-39f, 1e37f}) {
    CudaBuffer dq = CudaBuffer::from_vector(q), dx(q.size() * sizeof(float)), ds = device_scalar(scale);
    dequantize_int8_cuda(dq.as<int8_t>(), dx.as<float>(), 256, ds.as<float>(), nullptr);
    std::vector<float> expect(256);
    dequantize_int8_ref(q.data(), expect.data(), 256, scale);
    const std::vector<float> got = dx.download_vector<float>(256);
    for (size_t i = 0; i < 256; ++i) ASSERT_EQ(bits_of(got[i]), bits_of(expect[i])) << "q " << int(q[i]) << " scale " << scale;
  }
}

// Runs a device converter over `in` and returns the output.
template <typename Out, typename In, typename Launch>
std::vector<Out> on_device(const std::vector<In>& in, Launch launch) {
  CudaBuffer din = CudaBuffer::from_vector(in), dout(in.size() * sizeof(Out));
  launch(din.as<In>(), dout.as<Out>(), int64_t(in.size()));
  return dout.download_vector<Out>(in.size());
}

TEST(CudaConvert, DecodersMatchRefOnEveryPattern) {
  REQUIRE_CUDA_DEVICE();
  const std::vector<uint16_t> p16 = all_patterns<uint16_t>(1u << 16);
  const std::vector<uint8_t> p8 = all_patterns<uint8_t>(1u << 8);
  const auto fp16 = on_device<float>(p16, [](auto x, auto y, int64_t n) { convert_fp16_to_fp32_cuda(x, y, n, nullptr); });
  const auto bf16 = on_device<float>(p16, [](auto x, auto y, int64_t n) { convert_bf16_to_fp32_cuda(x, y, n, nullptr); });
  for (uint32_t h = 0; h <= 0xffffu; ++h) {
    ASSERT_EQ(bits_of(fp16[h]), bits_of(fp16_to_fp32_ref(uint16_t(h)))) << "fp16 " << h;
    ASSERT_EQ(bits_of(bf16[h]), bits_of(bf16_to_fp32_ref(uint16_t(h)))) << "bf16 " << h;
  }
  for (float scale : {1.0f, 0.37f, 1024.0f}) {
    CudaBuffer ds = device_scalar(scale);
    const float* s = ds.as<float>();
    const auto e4 = on_device<float>(p8, [s](auto x, auto y, int64_t n) { convert_e4m3_to_fp32_cuda(x, y, n, s, nullptr); });
    const auto e5 = on_device<float>(p8, [s](auto x, auto y, int64_t n) { convert_e5m2_to_fp32_cuda(x, y, n, s, nullptr); });
    for (uint32_t v = 0; v <= 0xffu; ++v) {
      ASSERT_EQ(bits_of(e4[v]), bits_of(e4m3_to_fp32_ref(uint8_t(v)) * scale)) << "e4m3 " << v << " scale " << scale;
      ASSERT_EQ(bits_of(e5[v]), bits_of(e5m2_to_fp32_ref(uint8_t(v)) * scale)) << "e5m2 " << v << " scale " << scale;
    }
  }
}

TEST(CudaConvert, EncodersMatchRefBitExactly) {
  REQUIRE_CUDA_DEVICE();
  const std::vector<float> x = encoder_inputs();
  const auto fp16 = on_device<uint16_t>(x, [](auto a, auto b, int64_t n) { convert_fp32_to_fp16_cuda(a, b, n, nullptr); });
  const auto bf16 = on_device<uint16_t>(x, [](auto a, auto b, int64_t n) { convert_fp32_to_bf16_cuda(a, b, n, nullptr); });
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(fp16[i], fp32_to_fp16_ref(x[i])) << std::hex << "fp16 of " << bits_of(x[i]);
    ASSERT_EQ(bf16[i], fp32_to_bf16_ref(x[i])) << std::hex << "bf16 of " << bits_of(x[i]);
  }
  for (float inv_scale : {1.0f, 0.37f, 1024.0f}) {
    CudaBuffer ds = device_scalar(inv_scale);
    const float* s = ds.as<float>();
    const auto e4 = on_device<uint8_t>(x, [s](auto a, auto b, int64_t n) { convert_fp32_to_e4m3_cuda(a, b, n, s, nullptr); });
    const auto e5 = on_device<uint8_t>(x, [s](auto a, auto b, int64_t n) { convert_fp32_to_e5m2_cuda(a, b, n, s, nullptr); });
    for (size_t i = 0; i < x.size(); ++i) {
      const float v = x[i] * inv_scale;  // the CPU converters' one FP32 multiply
      ASSERT_EQ(int(e4[i]), int(fp32_to_e4m3_ref(v))) << std::hex << "e4m3 of " << bits_of(x[i]) << " inv_scale " << inv_scale;
      ASSERT_EQ(int(e5[i]), int(fp32_to_e5m2_ref(v))) << std::hex << "e5m2 of " << bits_of(x[i]) << " inv_scale " << inv_scale;
    }
  }
}

TEST(CudaGemmEpilogue, AppliesScalesAndBeta) {
  REQUIRE_CUDA_DEVICE();
  // acc (2, 3) row-major with ld 4; c (2, 3) with ldc 5.
  const std::vector<int32_t> acc = {1, -2, 3, 99, 4, 5, -6, 99};
  const std::vector<float> sa = {0.5f, 2.0f}, sb = {1.0f, 0.25f, 4.0f};
  std::vector<float> c(10, 10.0f);
  CudaBuffer dacc = CudaBuffer::from_vector(acc), dsa = CudaBuffer::from_vector(sa), dsb = CudaBuffer::from_vector(sb),
             dc = CudaBuffer::from_vector(c);
  const EpilogueScales scales{dsa.as<float>(), ScaleMode::PER_CHANNEL, dsb.as<float>(), ScaleMode::PER_CHANNEL};
  gemm_dequant_epilogue_cuda(dacc.as<int32_t>(), 4, dc.as<float>(), 5, 2, 3, scales, 0.5f, nullptr);
  const std::vector<float> got = dc.download_vector<float>(10);
  const float expect[2][3] = {{1 * 0.5f * 1 + 5, -2 * 0.5f * 0.25f + 5, 3 * 0.5f * 4 + 5},
                              {4 * 2.0f * 1 + 5, 5 * 2.0f * 0.25f + 5, -6 * 2.0f * 4 + 5}};
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 3; ++j) EXPECT_EQ(got[size_t(i * 5 + j)], expect[i][j]) << i << "," << j;
    EXPECT_EQ(got[size_t(i * 5 + 3)], 10.0f);  // padding untouched
  }
}

}  // namespace
}  // namespace qsync
