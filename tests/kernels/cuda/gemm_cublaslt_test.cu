// File: tests/kernels/cuda/gemm_cublaslt_test.cu
// The "cuda" GEMM backend on the cuBLASLt engine: its support rules (no GPU needed), its
// behaviour without a device, and on a GPU every precision against the `ref` backend over
// awkward shapes, all transpose cases, padded leading dimensions and beta, INT8 and FP8 included
// (their operands are staged into cuBLASLt's TN layout, padded to multiples of 16).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/gemm_cublaslt.h"
#include "kernels/gemm_registry.h"
#include "kernels/ref/gemm_ref.h"
#include "tests/kernels/gemm_test_support.h"

namespace qsync {
namespace {

using testing::make_operand;
using testing::nmse;
using testing::Shape;
using testing::TestOperand;

#define REQUIRE_CUDA_DEVICE() \
  if (qsync::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device"

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

GemmSignature signature(Precision a, Precision b, int64_t m, int64_t n, int64_t k, Transpose ta, Transpose tb,
                        int64_t lda = 0, int64_t ldb = 0) {
  return GemmSignature{a, b, m, n, k, ta, tb, lda, ldb, 0, false};
}

constexpr Transpose NO = Transpose::NO, YES = Transpose::YES;
const Transpose TRANSPOSE_CASES[][2] = {
    {NO, YES},   // forward          X * W^T
    {NO, NO},    // input gradient   dY * W
    {YES, NO},   // weight gradient  dY^T * X
    {YES, YES},  // not used by training; still must be right
};

// ------------------------------------------------------------------------------------------
// Without a GPU: the rules of `supports` and the no-device behaviour.

TEST(CudaGemmNoDevice, SupportsSaysNoDeviceAndGemmThrows) {
  // Not skipped: the pure rules say so for sm 0 on every machine ...
  const GemmSignature s = signature(Precision::FP32, Precision::FP32, 4, 4, 4, NO, YES);
  const GemmSupport rule = gemm_cuda_supports_for_sm(s, 0);
  EXPECT_EQ(rule.level, SupportLevel::UNSUPPORTED);
  EXPECT_EQ(rule.detail, "no CUDA device");
  const GemmBackend& cuda = gemm_backend_by_name("cuda");
  EXPECT_STREQ(cuda.name(), "cuda");
  // ... and the registered backend does on a machine without one. Host pointers are fine here:
  // nothing is dereferenced before the backend refuses.
  std::vector<float> a(16, 1.0f), b(16, 1.0f), c(16, 0.0f);
  GemmDesc d;
  d.m = d.n = d.k = 4;
  d.a = {a.data(), Precision::FP32, NO, 0};
  d.b = {b.data(), Precision::FP32, YES, 0};
  d.c = c.data();
  if (cuda_device_count() == 0) {
    const GemmSupport sup = cuda.supports(s);
    EXPECT_EQ(sup.level, SupportLevel::UNSUPPORTED);
    EXPECT_EQ(sup.detail, "no CUDA device");
    try {
      cuda.gemm(d);
      FAIL() << "gemm without a CUDA device must throw GemmError";
    } catch (const GemmError& e) {
      EXPECT_TRUE(contains(e.what(), "no CUDA device")) << e.what();
    }
  } else {
    // With a device, a rejected signature (fp16 x bf16) still throws GemmError before any
    // pointer is touched.
    d.a.precision = Precision::FP16;
    d.b.precision = Precision::BF16;
    EXPECT_THROW(cuda.gemm(d), GemmError);
  }
}

TEST(CudaGemmRules, FloatPrecisionsFollowTheComputeCapability) {
  auto level = [](Precision p, int sm) {
    return gemm_cuda_supports_for_sm(signature(p, p, 7, 5, 13, YES, NO), sm).level;
  };
  EXPECT_EQ(level(Precision::FP32, 75), SupportLevel::NATIVE);
  EXPECT_EQ(level(Precision::FP16, 75), SupportLevel::NATIVE);
  EXPECT_EQ(level(Precision::TF32, 75), SupportLevel::UNSUPPORTED);
  EXPECT_EQ(level(Precision::TF32, 80), SupportLevel::NATIVE);
  EXPECT_EQ(level(Precision::BF16, 75), SupportLevel::UNSUPPORTED);
  EXPECT_EQ(level(Precision::BF16, 90), SupportLevel::NATIVE);
  const GemmSupport mixed =
      gemm_cuda_supports_for_sm(signature(Precision::FP16, Precision::BF16, 8, 8, 8, NO, YES), 90);
  EXPECT_FALSE(mixed.ok());
  EXPECT_TRUE(contains(mixed.detail, "must match")) << mixed.detail;
}

TEST(CudaGemmRules, Int8TakesEveryLayoutAndShapeFromSm75) {
  EXPECT_FALSE(gemm_cuda_supports_for_sm(signature(Precision::INT8, Precision::INT8, 8, 8, 16, NO, YES), 70).ok());
  const GemmSupport forward =
      gemm_cuda_supports_for_sm(signature(Precision::INT8, Precision::INT8, 32, 16, 64, NO, YES), 75);
  EXPECT_EQ(forward.level, SupportLevel::NATIVE);
  EXPECT_FALSE(contains(forward.detail, "first")) << forward.detail;  // TN, multiples of 16: no staging
  for (const auto& t : TRANSPOSE_CASES) {
    const GemmSupport s = gemm_cuda_supports_for_sm(signature(Precision::INT8, Precision::INT8, 7, 5, 30, t[0], t[1]), 90);
    EXPECT_EQ(s.level, SupportLevel::NATIVE);
    EXPECT_TRUE(contains(s.detail, "padded to multiples of 16")) << s.detail;
    if (t[0] != NO || t[1] != YES) EXPECT_TRUE(contains(s.detail, "transposed into the TN layout")) << s.detail;
  }
  GemmSignature u8 = signature(Precision::INT8, Precision::INT8, 8, 8, 32, NO, YES);
  u8.a_int8_unsigned = true;
  const GemmSupport s = gemm_cuda_supports_for_sm(u8, 90);
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.detail, "unsigned int8")) << s.detail;
}

TEST(CudaGemmRules, Fp8NeedsSm89AndNeverE5m2Twice) {
  const Precision e4 = Precision::FP8_E4M3, e5 = Precision::FP8_E5M2;
  const GemmSupport old = gemm_cuda_supports_for_sm(signature(e4, e4, 16, 16, 16, NO, YES), 80);
  EXPECT_FALSE(old.ok());
  EXPECT_TRUE(contains(old.detail, "sm89")) << old.detail;
  for (auto [a, b] : {std::pair{e4, e4}, std::pair{e4, e5}, std::pair{e5, e4}})
    for (const auto& t : TRANSPOSE_CASES)
      EXPECT_EQ(gemm_cuda_supports_for_sm(signature(a, b, 24, 48, 70, t[0], t[1]), 89).level, SupportLevel::NATIVE);
  const GemmSupport e5e5 = gemm_cuda_supports_for_sm(signature(e5, e5, 32, 48, 64, NO, YES), 90);
  EXPECT_FALSE(e5e5.ok());
  EXPECT_TRUE(contains(e5e5.detail, "e5m2 x e5m2")) << e5e5.detail;
}

// ------------------------------------------------------------------------------------------
// On a GPU: results against `ref`.

// A TestOperand's bytes and scales copied to the device, with a GemmOperand pointing there.
struct DeviceOperand {
  CudaBuffer data, scales;
  GemmOperand op;
};
DeviceOperand to_device(const TestOperand& h) {
  DeviceOperand d{CudaBuffer::from_vector(h.bytes), CudaBuffer::from_vector(h.scales), h.op};
  d.op.data = d.data.data();
  d.op.scales = h.op.scales != nullptr ? d.scales.as<float>() : nullptr;
  return d;
}

struct Problem {
  Precision a, b;
  ScaleMode a_mode = ScaleMode::NONE, b_mode = ScaleMode::NONE;
  Transpose ta = NO, tb = YES;
  Shape s{1, 1, 1};
  int64_t pad = 0;      // added to every leading dimension
  int64_t ldc_pad = 0;  // added to ldc on top of pad
  float beta = 0.0f;
  bool nan_c = false;   // fill C with NaN (beta must then be 0: C is not read)
};

// Runs the cuda backend and `ref` on the same encoded inputs; returns the NMSE between them.
double cuda_vs_ref(const Problem& p, uint32_t seed) {
  std::mt19937 rng(seed);
  const bool a_t = p.ta == YES, b_t = p.tb == YES;
  const int64_t a_rows = a_t ? p.s.k : p.s.m, a_cols = a_t ? p.s.m : p.s.k;
  const int64_t b_rows = b_t ? p.s.n : p.s.k, b_cols = b_t ? p.s.k : p.s.n;
  const TestOperand a = make_operand(p.a, p.ta, a_rows, a_cols, a_cols + p.pad, p.a_mode, rng, !a_t);
  const TestOperand b = make_operand(p.b, p.tb, b_rows, b_cols, b_cols + p.pad, p.b_mode, rng, b_t);
  const int64_t ldc = p.s.n + p.pad + p.ldc_pad;
  std::vector<float> c0(size_t(p.s.m * ldc));
  std::normal_distribution<float> dist;
  for (auto& v : c0) v = p.nan_c ? std::numeric_limits<float>::quiet_NaN() : dist(rng);

  GemmDesc d;
  d.m = p.s.m, d.n = p.s.n, d.k = p.s.k;
  d.a = a.op, d.b = b.op;
  d.ldc = ldc;
  d.beta = p.beta;
  std::vector<float> c_ref = c0;
  d.c = c_ref.data();
  gemm_ref(d);

  DeviceOperand da = to_device(a), db = to_device(b);
  CudaBuffer dc = CudaBuffer::from_vector(c0);
  d.a = da.op, d.b = db.op;
  d.c = dc.as<float>();
  gemm_backend_by_name("cuda").gemm(d);
  const std::vector<float> c_cuda = dc.download_vector<float>(c0.size());
  for (int64_t i = 0; i < p.s.m; ++i)  // the padding columns of C are not written
    for (int64_t j = p.s.n; j < ldc; ++j)
      if (!p.nan_c) EXPECT_EQ(c_cuda[size_t(i * ldc + j)], c0[size_t(i * ldc + j)]) << "padding of C overwritten";
  return nmse(c_cuda.data(), c_ref.data(), p.s.m, p.s.n, ldc);
}

std::string describe(const Problem& p) {
  return std::string(precision_name(p.a)) + " x " + precision_name(p.b) + " " + testing::transpose_case_name(p.ta, p.tb) +
         " m=" + std::to_string(p.s.m) + " n=" + std::to_string(p.s.n) + " k=" + std::to_string(p.s.k) +
         " pad=" + std::to_string(p.pad) + " ldc_pad=" + std::to_string(p.ldc_pad) + " beta=" + std::to_string(p.beta);
}

bool device_supports(const Problem& p) {
  const GemmSignature s{p.a, p.b, p.s.m, p.s.n, p.s.k, p.ta, p.tb, 0, 0, 0, false};
  return gemm_backend_by_name("cuda").supports(s).ok();
}

// NMSE bounds against `ref` (double accumulation of the same decoded inputs), so each bound
// covers accumulation order and rounding only:
//   fp32: FP32 FMA accumulation, relative error ~ sqrt(k) * 2^-24 per element (k <= 513):
//         NMSE ~ 1e-12; 1e-9 leaves room for split-K orders.
//   tf32, fp16, bf16: the inputs are exact in the format, products exact in FP32; tensor cores
//         accumulate in FP32 but may truncate in their adder tree: NMSE ~ 1e-11; bound 1e-8.
//   int8: int32 accumulation is exact (k * 127^2 < 2^24, so the FP32 conversion is exact too);
//         the epilogue rounds twice at 2^-24: NMSE < 1e-13; bound 1e-12.
//   fp8:  Hopper's FP8 tensor cores keep ~14 mantissa bits between the FP32 promotions that
//         cuBLASLt does with fast accumulation off: relative error up to ~2^-14 per element,
//         NMSE ~ 1e-9; bound 1e-6.
double nmse_bound(Precision p) {
  switch (p) {
    case Precision::FP32: return 1e-9;
    case Precision::INT8: return 1e-12;
    case Precision::FP8_E4M3:
    case Precision::FP8_E5M2: return 1e-6;
    default: return 1e-8;
  }
}

TEST(CudaGemm, FloatPrecisionsMatchRefInEveryLayout) {
  REQUIRE_CUDA_DEVICE();
  uint32_t seed = 1;
  for (Precision prec : {Precision::FP32, Precision::TF32, Precision::FP16, Precision::BF16})
    for (const auto& t : TRANSPOSE_CASES)
      for (const Shape& s : testing::awkward_shapes())
        for (auto [pad, beta] : {std::pair<int64_t, float>{0, 0.0f}, {3, 0.75f}}) {
          Problem p{prec, prec, ScaleMode::NONE, ScaleMode::NONE, t[0], t[1], s, pad, 0, beta};
          if (!device_supports(p)) continue;  // tf32/bf16 below sm80
          SCOPED_TRACE(describe(p));
          EXPECT_LE(cuda_vs_ref(p, seed++), nmse_bound(prec));
        }
}

TEST(CudaGemm, Int8MatchesRefWithEveryScaleModeLayoutAndShape) {
  REQUIRE_CUDA_DEVICE();
  const auto T = ScaleMode::PER_TENSOR, C = ScaleMode::PER_CHANNEL;
  uint32_t seed = 100;
  for (const auto& t : TRANSPOSE_CASES)
    for (auto [a_mode, b_mode] : {std::pair{T, T}, std::pair{T, C}, std::pair{C, T}, std::pair{C, C}}) {
      // Per-channel scales lie along the output: rows of an untransposed A, columns of a transposed B.
      if ((a_mode == C && t[0] == YES) || (b_mode == C && t[1] == NO)) continue;
      for (const Shape& s : testing::awkward_shapes())
        for (auto [pad, ldc_pad, beta] : {std::tuple<int64_t, int64_t, float>{0, 0, 0.0f}, {4, 1, 0.5f}}) {
          Problem p{Precision::INT8, Precision::INT8, a_mode, b_mode, t[0], t[1], s, pad, ldc_pad, beta};
          SCOPED_TRACE(describe(p));
          ASSERT_TRUE(device_supports(p));
          EXPECT_LE(cuda_vs_ref(p, seed++), nmse_bound(Precision::INT8));
        }
    }
}

TEST(CudaGemm, Fp8MatchesRefInEveryLayoutOnSm89AndLater) {
  REQUIRE_CUDA_DEVICE();
  if (cuda_device_sm(cuda_current_device()) < 89) GTEST_SKIP() << "FP8 needs sm89+";
  const Precision e4 = Precision::FP8_E4M3, e5 = Precision::FP8_E5M2;
  const auto T = ScaleMode::PER_TENSOR, C = ScaleMode::PER_CHANNEL;
  // Multiples of 16 (TN, per tensor: cuBLASLt writes C) and awkward shapes (staged, padded).
  std::vector<Shape> shapes = {{16, 16, 16}, {32, 48, 64}, {64, 128, 80}, {144, 16, 32}, {16, 272, 528}};
  for (const Shape& s : testing::awkward_shapes()) shapes.push_back(s);
  uint32_t seed = 200;
  for (auto [a, b] : {std::pair{e4, e4}, std::pair{e4, e5}, std::pair{e5, e4}})
    for (const auto& t : TRANSPOSE_CASES)
      for (auto [a_mode, b_mode] : {std::pair{T, T}, std::pair{T, C}}) {  // per-channel: the epilogue applies it
        if (b_mode == C && t[1] == NO) continue;
        for (const Shape& s : shapes)
          // ldc_pad 1 makes C unaligned for cuBLASLt: the epilogue path takes it.
          for (auto [pad, ldc_pad, beta] : {std::tuple<int64_t, int64_t, float>{0, 0, 0.0f}, {16, 0, 0.5f}, {0, 1, 0.5f}}) {
            Problem p{a, b, a_mode, b_mode, t[0], t[1], s, pad, ldc_pad, beta};
            SCOPED_TRACE(describe(p));
            ASSERT_TRUE(device_supports(p));
            EXPECT_LE(cuda_vs_ref(p, seed++), nmse_bound(a));
          }
      }
}

TEST(CudaGemm, BetaZeroDoesNotReadC) {
  REQUIRE_CUDA_DEVICE();
  const int sm = cuda_device_sm(cuda_current_device());
  std::vector<Problem> problems = {
      {Precision::FP32, Precision::FP32, ScaleMode::NONE, ScaleMode::NONE, NO, YES, {33, 65, 17}},
      {Precision::FP16, Precision::FP16, ScaleMode::NONE, ScaleMode::NONE, YES, NO, {7, 5, 13}},
      {Precision::INT8, Precision::INT8, ScaleMode::PER_TENSOR, ScaleMode::PER_CHANNEL, NO, YES, {9, 12, 20}},
  };
  if (sm >= 89)
    problems.push_back({Precision::FP8_E4M3, Precision::FP8_E4M3, ScaleMode::PER_TENSOR, ScaleMode::PER_TENSOR, NO,
                        YES, {32, 32, 32}});
  uint32_t seed = 300;
  for (Problem p : problems) {
    p.nan_c = true;
    SCOPED_TRACE(describe(p) + " C = NaN");
    EXPECT_LE(cuda_vs_ref(p, seed++), nmse_bound(p.a));  // a NaN anywhere makes the NMSE NaN: fails
  }
}

}  // namespace
}  // namespace qsync
