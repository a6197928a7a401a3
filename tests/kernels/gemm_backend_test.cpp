// Unit tests for kernels/gemm.h backends: every host backend against the `ref` oracle over awkward
// shapes, all transpose cases, every precision with its own error bound; plus bad input.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <thread>
#include <tuple>

#include "kernels/device_class.h"

#include "kernels/gemm_registry.h"
#include "kernels/ref/gemm_ref.h"
#include "tests/kernels/gemm_test_support.h"

namespace qsync {
namespace {

using testing::make_operand;
using testing::nmse;

struct PrecisionCase {
  std::string name;
  Precision a, b;
  ScaleMode a_mode, b_mode;
  bool a_unsigned;
  // Largest normalized MSE of the backend against `ref`, which sees the same encoded inputs and
  // accumulates in double. So the bound covers only accumulation order and output rounding.
  double max_nmse;
  float a_quant_max = 0.0f;  // 0: the format's full range
};

// Floating formats: products of the decoded inputs are exact in FP32 (<= 24 significant bits for
// bf16/fp16/tf32/fp8 operands); the FP32 sum of k <= 513 terms has relative error <= k * 2^-24
// ~ 3e-5 in the worst case and ~ sqrt(k) * 2^-24 ~ 1.4e-6 typically, so NMSE stays < 1e-9.
// INT8: int32 accumulation is exact; only the final FP32 scale multiply rounds: NMSE < 1e-12.
const std::vector<PrecisionCase>& precision_cases() {
  static const std::vector<PrecisionCase> cases = {
      {"fp32", Precision::FP32, Precision::FP32, ScaleMode::NONE, ScaleMode::NONE, false, 1e-9},
      {"tf32", Precision::TF32, Precision::TF32, ScaleMode::NONE, ScaleMode::NONE, false, 1e-9},
      {"bf16", Precision::BF16, Precision::BF16, ScaleMode::NONE, ScaleMode::NONE, false, 1e-9},
      {"fp16", Precision::FP16, Precision::FP16, ScaleMode::NONE, ScaleMode::NONE, false, 1e-9},
      {"int8_tensor", Precision::INT8, Precision::INT8, ScaleMode::PER_TENSOR, ScaleMode::PER_TENSOR, false, 1e-12},
      {"int8_channel", Precision::INT8, Precision::INT8, ScaleMode::PER_TENSOR, ScaleMode::PER_CHANNEL, false, 1e-12},
      {"int8_rows", Precision::INT8, Precision::INT8, ScaleMode::PER_CHANNEL, ScaleMode::PER_TENSOR, false, 1e-12},
      {"u8s8_channel", Precision::INT8, Precision::INT8, ScaleMode::PER_TENSOR, ScaleMode::PER_CHANNEL, true, 1e-12},
      // 7-bit activations: the native path of CPUs without VNNI (u8 + zero point in oneDNN).
      {"int8_7bit_channel", Precision::INT8, Precision::INT8, ScaleMode::PER_TENSOR, ScaleMode::PER_CHANNEL, false,
       1e-12, 63.0f},
      {"u8_7bit", Precision::INT8, Precision::INT8, ScaleMode::PER_TENSOR, ScaleMode::PER_TENSOR, true, 1e-12, 127.0f},
      {"e4m3", Precision::FP8_E4M3, Precision::FP8_E4M3, ScaleMode::PER_TENSOR, ScaleMode::PER_TENSOR, false, 1e-9},
      {"e4m3_e5m2", Precision::FP8_E4M3, Precision::FP8_E5M2, ScaleMode::PER_TENSOR, ScaleMode::PER_TENSOR, false, 1e-9},
      {"e5m2", Precision::FP8_E5M2, Precision::FP8_E5M2, ScaleMode::PER_TENSOR, ScaleMode::PER_TENSOR, false, 1e-9},
  };
  return cases;
}

const Transpose TRANSPOSE_CASES[][2] = {
    {Transpose::NO, Transpose::YES},   // forward  X * W^T
    {Transpose::NO, Transpose::NO},    // input gradient dY * W
    {Transpose::YES, Transpose::NO},   // weight gradient dY^T * X
    {Transpose::YES, Transpose::YES},  // not used by training; still must be right
};

// Runs `backend` and `ref` on one problem (with a bias epilogue when `bias`) and returns the NMSE
// between them.
double compare_with_ref(const GemmBackend& backend, const PrecisionCase& pc, Transpose ta, Transpose tb,
                        testing::Shape s, int64_t pad, float beta, uint32_t seed, bool bias = false) {
  std::mt19937 rng(seed);
  const bool a_t = ta == Transpose::YES, b_t = tb == Transpose::YES;
  const int64_t a_rows = a_t ? s.k : s.m, a_cols = a_t ? s.m : s.k;
  const int64_t b_rows = b_t ? s.n : s.k, b_cols = b_t ? s.k : s.n;
  auto a = make_operand(pc.a, ta, a_rows, a_cols, a_cols + pad, pc.a_mode, rng, /*rows=*/!a_t, pc.a_unsigned,
                        pc.a_quant_max);
  auto b = make_operand(pc.b, tb, b_rows, b_cols, b_cols + pad, pc.b_mode, rng, /*rows=*/b_t);
  const int64_t ldc = s.n + pad;
  std::vector<float> c0(size_t(s.m * ldc));
  std::normal_distribution<float> dist;
  for (auto& v : c0) v = dist(rng);
  std::vector<float> c_backend = c0, c_ref = c0;
  std::vector<float> bias_values(size_t(s.n));
  for (auto& v : bias_values) v = dist(rng);
  GemmDesc d = testing::gemm_desc(s, a, b, ldc, beta, bias ? bias_values.data() : nullptr);
  d.c = c_ref.data();
  gemm_ref(d);
  d.c = c_backend.data();
  backend.gemm(d);
  if (!bias) return nmse(c_backend.data(), c_ref.data(), s.m, s.n, ldc);
  // The bias is one FP32 add on each side, rounding at the larger of the product and the bias:
  // normalized by both (a bias of the opposite sign would cancel the output's own energy, and a
  // small product's one-ulp difference is measured against the bias it was added to).
  double num = 0, den = 0;
  for (int64_t i = 0; i < s.m; ++i)
    for (int64_t j = 0; j < s.n; ++j) {
      const double x = c_backend[size_t(i * ldc + j)], y = c_ref[size_t(i * ldc + j)], b = bias_values[size_t(j)];
      num += (x - y) * (x - y);
      den += (y - b) * (y - b) + b * b;
    }
  return den == 0 ? num : num / den;
}

TEST(GemmRef, HandComputed2x2) {
  // [1 2; 3 4] * [5 6; 7 8]^T = [17 23; 39 53]
  const float a[] = {1, 2, 3, 4}, b[] = {5, 6, 7, 8};
  float c[4] = {};
  GemmDesc d;
  d.m = d.n = d.k = 2;
  d.a = {a, Precision::FP32, Transpose::NO, 0};
  d.b = {b, Precision::FP32, Transpose::YES, 0};
  d.c = c;
  gemm_ref(d);
  EXPECT_EQ(c[0], 17);
  EXPECT_EQ(c[1], 23);
  EXPECT_EQ(c[2], 39);
  EXPECT_EQ(c[3], 53);
}

TEST(GemmRef, Int8ScalesPerChannelAndBeta) {
  const int8_t a[] = {10, -20}, b[] = {3, 4, -5, 6};  // a (1, 2); b (2, 2) stored (n, k)
  const float sa = 0.5f, sb[] = {0.25f, 2.0f};
  float c[2] = {100, 100};
  GemmDesc d;
  d.m = 1, d.n = 2, d.k = 2;
  d.a = {a, Precision::INT8, Transpose::NO, 0, ScaleMode::PER_TENSOR, &sa};
  d.b = {b, Precision::INT8, Transpose::YES, 0, ScaleMode::PER_CHANNEL, sb};
  d.c = c;
  d.beta = 0.5f;
  gemm_ref(d);
  EXPECT_FLOAT_EQ(c[0], 0.5f * 0.25f * (30 - 80) + 50);   // -6.25 + 50
  EXPECT_FLOAT_EQ(c[1], 0.5f * 2.0f * (-50 - 120) + 50);  // -170 + 50
}

class GemmBackendVsRef : public ::testing::TestWithParam<std::string> {};

TEST_P(GemmBackendVsRef, AllPrecisionsShapesAndTransposes) {
  const GemmBackend& backend = gemm_backend_by_name(GetParam());
  uint32_t seed = 1;
  for (const PrecisionCase& pc : precision_cases())
    for (const auto& t : TRANSPOSE_CASES)
      for (const testing::Shape& s : testing::awkward_shapes()) {
        GemmSignature sig{pc.a, pc.b, s.m, s.n, s.k, t[0], t[1], 0, 0, 0, pc.a_unsigned};
        const GemmSupport sup = backend.supports(sig);
        if (!sup.ok()) continue;  // the backend says so; unsupported calls are tested below
        // With and without the bias epilogue: fused by oneDNN (no scales, beta 0) or a pass after.
        for (const auto& [pad, beta, bias] : {std::tuple<int64_t, float, bool>{0, 0.0f, false},
                                              {3, 0.5f, false}, {0, 0.0f, true}, {3, 0.5f, true}}) {
          SCOPED_TRACE(pc.name + " " + testing::transpose_case_name(t[0], t[1]) + " m=" + std::to_string(s.m) +
                       " n=" + std::to_string(s.n) + " k=" + std::to_string(s.k) + " pad=" + std::to_string(pad) +
                       (bias ? " bias" : "") + " via " + sup.detail);
          EXPECT_LE(compare_with_ref(backend, pc, t[0], t[1], s, pad, beta, seed++, bias), pc.max_nmse);
        }
      }
}

INSTANTIATE_TEST_SUITE_P(HostBackends, GemmBackendVsRef, ::testing::Values("cpu"));

// The cpu backend runs different oneDNN kernels under each device class (AVX2 INT8 has no VNNI,
// for instance): the same sweep, in a forked child per class (the ISA cap is per process).
TEST(GemmBackendCpu, AgreesWithRefUnderEveryCpuDeviceClass) {
  for (const DeviceClass& c : device_classes()) {
    if (c.kind != DeviceKind::CPU || !device_class_availability(c).available) continue;
    const pid_t pid = fork();
    if (pid == 0) {
      device_class_activate(c, 1);
      const GemmBackend& cpu = gemm_backend_by_name("cpu");
      int failures = 0;
      uint32_t seed = 1000;
      for (const PrecisionCase& pc : precision_cases())
        for (const auto& t : TRANSPOSE_CASES)
          for (const testing::Shape& s : testing::awkward_shapes()) {
            GemmSignature sig{pc.a, pc.b, s.m, s.n, s.k, t[0], t[1], 0, 0, 0, pc.a_unsigned};
            if (!cpu.supports(sig).ok()) continue;
            const bool bias = seed % 2 == 0;  // half the problems with the bias epilogue, beta 0 then
            const double e = compare_with_ref(cpu, pc, t[0], t[1], s, 1, bias ? 0.0f : 0.5f, seed++, bias);
            if (!(e <= pc.max_nmse)) {
              std::fprintf(stderr, "%s: %s %s m=%ld n=%ld k=%ld nmse=%g (bound %g)\n", c.name.c_str(), pc.name.c_str(),
                           testing::transpose_case_name(t[0], t[1]).c_str(), long(s.m), long(s.n), long(s.k), e,
                           pc.max_nmse);
              ++failures;
            }
          }
      _exit(failures == 0 ? 0 : 1);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << c.name << ": see the mismatches above";
  }
}

TEST(GemmBackendCpu, FormsTheTrainingPrecisionsNatively) {
  // Whatever the ISA, FP32 and INT8 have oneDNN JIT kernels on any x86-64 with AVX2.
  const GemmBackend& cpu = gemm_backend_by_name("cpu");
  for (Precision p : {Precision::FP32, Precision::INT8}) {
    GemmSignature s{p, p, 128, 128, 128, Transpose::NO, Transpose::YES};
    const GemmSupport sup = cpu.supports(s);
    EXPECT_EQ(sup.level, SupportLevel::NATIVE) << precision_name(p) << ": " << sup.detail;
  }
  GemmSignature fp8{Precision::FP8_E4M3, Precision::FP8_E4M3, 64, 64, 64, Transpose::NO, Transpose::YES};
  EXPECT_EQ(cpu.supports(fp8).level, SupportLevel::EMULATED);
}

// The bias oneDNN adds in its epilogue is the one FP32 add of the pass it replaces: bit for bit
// the product plus bias[j], so training results do not depend on which path a GEMM took. INT8
// (its pass after the output scales, one per tensor or one per column of C from B's per-row
// scales) likewise: oneDNN 2's bias comes before its output scales, and its add post-op after
// them cost 0.067 ms on 2048 x 192 x 64 against 0.023 for the pass.
TEST(GemmBackendCpu, FusedBiasRoundsAsTheAddAfterTheProduct) {
  const GemmBackend& cpu = gemm_backend_by_name("cpu");
  std::mt19937 rng(7);
  struct Case {
    Precision p;
    ScaleMode a_scales, b_scales;  // INT8: B per tensor, or per stored row (C's columns)
    const char* name;
  };
  const Case cases[] = {{Precision::FP32, ScaleMode::NONE, ScaleMode::NONE, "fp32"},
                        {Precision::BF16, ScaleMode::NONE, ScaleMode::NONE, "bf16"},
                        {Precision::INT8, ScaleMode::PER_TENSOR, ScaleMode::PER_TENSOR, "int8"},
                        {Precision::INT8, ScaleMode::PER_TENSOR, ScaleMode::PER_CHANNEL, "int8 per column"}};
  for (const testing::Shape& s : testing::awkward_shapes())
    for (const Case& c : cases) {
      const Precision p = c.p;
      if (!cpu.supports({p, p, s.m, s.n, s.k, Transpose::NO, Transpose::YES}).ok()) continue;
      auto a = make_operand(p, Transpose::NO, s.m, s.k, s.k, c.a_scales, rng, true);
      auto b = make_operand(p, Transpose::YES, s.n, s.k, s.k, c.b_scales, rng, true);  // stored (n, k)
      std::normal_distribution<float> dist;
      std::vector<float> bias(size_t(s.n)), fused(size_t(s.m * s.n)), after(size_t(s.m * s.n));
      for (auto& v : bias) v = dist(rng);
      GemmDesc d;
      d.m = s.m, d.n = s.n, d.k = s.k;
      d.a = a.op, d.b = b.op;
      d.c = after.data();
      cpu.gemm(d);
      for (int64_t i = 0; i < s.m; ++i)
        for (int64_t j = 0; j < s.n; ++j) after[size_t(i * s.n + j)] += bias[size_t(j)];
      d.c = fused.data();
      d.bias = bias.data();
      cpu.gemm(d);
      SCOPED_TRACE(std::string(c.name) + " m=" + std::to_string(s.m) + " n=" + std::to_string(s.n) +
                   " k=" + std::to_string(s.k));
      EXPECT_EQ(0, std::memcmp(fused.data(), after.data(), fused.size() * sizeof(float)));
    }
}

// ---------------------------------------------------------------------------------------------
// Bad input: every backend throws GemmError naming the problem, never computes garbage.

GemmDesc small_fp32(const float* a, const float* b, float* c) {
  GemmDesc d;
  d.m = 2, d.n = 2, d.k = 2;
  d.a = {a, Precision::FP32, Transpose::NO, 0};
  d.b = {b, Precision::FP32, Transpose::YES, 0};
  d.c = c;
  return d;
}

void expect_gemm_error(const GemmBackend& backend, const GemmDesc& d, const std::string& needle) {
  try {
    backend.gemm(d);
    ADD_FAILURE() << backend.name() << ": expected GemmError containing '" << needle << "'";
  } catch (const GemmError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(GemmBadInput, EveryHostBackendNamesTheProblem) {
  const float a[8] = {}, b[8] = {};
  float c[8] = {};
  const int8_t qa[4] = {}, qb[4] = {};
  for (const char* name : {"ref", "cpu"}) {
    const GemmBackend& be = gemm_backend_by_name(name);
    GemmDesc d = small_fp32(a, b, c);
    d.a.ld = 1;  // shape mismatch: a row of opA has k = 2 elements
    expect_gemm_error(be, d, "leading dimension of a");
    d = small_fp32(a, b, c);
    d.k = 0;
    expect_gemm_error(be, d, "sizes must be positive");
    d = small_fp32(a, b, c);
    d.b.precision = Precision::BF16;
    expect_gemm_error(be, d, "precisions must match");
    d = small_fp32(a, b, c);
    d.a = {qa, Precision::INT8, Transpose::NO, 0};
    d.b = {qb, Precision::INT8, Transpose::YES, 0};
    expect_gemm_error(be, d, "needs scales");
    d = small_fp32(a, b, c);
    d.c = nullptr;
    expect_gemm_error(be, d, "output c");
  }
}

TEST(GemmRegistry, ListsBackendsAndNamesUnknownOnes) {
  std::vector<std::string> names;
  for (const GemmBackend* b : gemm_backends()) names.push_back(b->name());
  EXPECT_EQ(names[0], "ref");
  EXPECT_EQ(names[1], "cpu");
  try {
    gemm_backend_by_name("tpu");
    ADD_FAILURE() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("ref, cpu"), std::string::npos) << e.what();
  }
}

// Two threads running the same cached primitive at once (tensor-parallel ranks as threads) each
// get their own result: a scratchpad shared between concurrent calls mixed them up before.
TEST(GemmBackendCpu, ConcurrentCallsOfOneShapeDoNotShareScratch) {
  const GemmBackend& cpu = gemm_backend_by_name("cpu");
  constexpr int64_t M = 12, N = 96, K = 32;  // a TP rank's QKV projection of a short prompt
  std::mt19937 rng(7);
  std::normal_distribution<float> dist;
  std::vector<float> a[2], w[2], serial[2];
  for (int t = 0; t < 2; ++t) {
    a[t].resize(size_t(M * K));
    w[t].resize(size_t(N * K));
    for (float& v : a[t]) v = dist(rng);
    for (float& v : w[t]) v = dist(rng);
    serial[t].assign(size_t(M * N), 0.0f);
    GemmDesc d = small_fp32(a[t].data(), w[t].data(), serial[t].data());
    d.m = M, d.n = N, d.k = K;
    cpu.gemm(d);
  }
  int mismatches[2] = {0, 0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t)
    threads.emplace_back([&, t] {
      std::vector<float> c(size_t(M * N));
      for (int rep = 0; rep < 300; ++rep) {
        GemmDesc d = small_fp32(a[t].data(), w[t].data(), c.data());
        d.m = M, d.n = N, d.k = K;
        cpu.gemm(d);
        if (c != serial[t]) ++mismatches[t];
      }
    });
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(mismatches[0], 0);
  EXPECT_EQ(mismatches[1], 0);
}

}  // namespace
}  // namespace qsync
