// File: tests/kernels/cuda/cublaslt_matmul_test.cu
// The cuBLASLt engine beyond the registry's GEMM: the bias epilogue and the row sums of op(A)
// (BGRADB, or their kernel fallbacks) against plain loops, strided batches against one GEMM per
// matrix, the plan cache (one plan per distinct GEMM), and run-to-run bitwise determinism.
// Every test needs a GPU and skips without one (reported as skipped by ctest).
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cuda/cublaslt_matmul.h"
#include "kernels/cuda/cuda_device.h"

namespace qsync {
namespace {

#define REQUIRE_CUDA_DEVICE() \
  if (qsync::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device"

std::vector<float> normal(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// C (m, n) = A (m, k) B^T (B stored (n, k)), in double.
std::vector<double> reference(const std::vector<float>& a, const std::vector<float>& b, int64_t m, int64_t n, int64_t k) {
  std::vector<double> c(size_t(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t p = 0; p < k; ++p) c[size_t(i * n + j)] += double(a[size_t(i * k + p)]) * double(b[size_t(j * k + p)]);
  return c;
}

CudaMatmul fp32_gemm(const CudaBuffer& a, Transpose ta, const CudaBuffer& b, Transpose tb, CudaBuffer& c, int64_t m,
                     int64_t n, int64_t k) {
  CudaMatmul mm;
  mm.gemm.m = m, mm.gemm.n = n, mm.gemm.k = k;
  mm.gemm.a = {a.data(), Precision::FP32, ta, 0};
  mm.gemm.b = {b.data(), Precision::FP32, tb, 0};
  mm.gemm.c = c.as<float>();
  return mm;
}

// Relative error bounds: FP32 GEMM accumulation over k <= 300 terms of N(0, 1) products, an
// element's relative error ~ sqrt(k) 2^-24 of its magnitude sum: 1e-5 of sqrt(k) leaves margin.
constexpr double FP32_TOLERANCE = 1e-5;

TEST(CudaMatmulEngine, BiasEpilogueAddsToEveryRow) {
  REQUIRE_CUDA_DEVICE();
  const int64_t m = 37, n = 70, k = 33;
  const auto a = normal(size_t(m * k), 1), b = normal(size_t(n * k), 2), bias = normal(size_t(n), 3);
  CudaBuffer da = CudaBuffer::from_vector(a), db = CudaBuffer::from_vector(b), dbias = CudaBuffer::from_vector(bias);
  CudaBuffer dc(size_t(m * n) * 4);
  CudaMatmulEngine engine(nullptr);
  CudaMatmul mm = fp32_gemm(da, Transpose::NO, db, Transpose::YES, dc, m, n, k);
  mm.gemm.bias = dbias.as<float>();
  engine.run(mm);
  QSYNC_CUDA_CHECK(cudaDeviceSynchronize());
  const auto c = dc.download_vector<float>(size_t(m * n));
  const auto ref = reference(a, b, m, n, k);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      EXPECT_NEAR(c[size_t(i * n + j)], ref[size_t(i * n + j)] + bias[size_t(j)], FP32_TOLERANCE * std::sqrt(double(k)) * 10)
          << i << ", " << j;
}

// dW (n, k) += dY^T (n, m) X (m, k) with db (n) += row sums of dY^T: a Linear's weight gradient.
TEST(CudaMatmulEngine, RowSumsOfATheBiasGradientAccumulate) {
  REQUIRE_CUDA_DEVICE();
  const int64_t rows = 130, n = 24, k = 40;  // dY (rows, n), X (rows, k)
  const auto dy = normal(size_t(rows * n), 4), x = normal(size_t(rows * k), 5);
  std::vector<float> db0(size_t(n), 0.5f), dw0(size_t(n * k), 0.25f);
  CudaBuffer ddy = CudaBuffer::from_vector(dy), dx = CudaBuffer::from_vector(x);
  CudaBuffer ddb = CudaBuffer::from_vector(db0), ddw = CudaBuffer::from_vector(dw0);
  CudaMatmulEngine engine(nullptr);
  CudaMatmul mm = fp32_gemm(ddy, Transpose::YES, dx, Transpose::NO, ddw, n, k, rows);
  mm.gemm.beta = 1.0f;
  mm.row_sums_of_a = ddb.as<float>();
  engine.run(mm);
  QSYNC_CUDA_CHECK(cudaDeviceSynchronize());
  const auto db = ddb.download_vector<float>(size_t(n));
  const auto dw = ddw.download_vector<float>(size_t(n * k));
  for (int64_t j = 0; j < n; ++j) {
    double sum = 0.5;
    for (int64_t r = 0; r < rows; ++r) sum += dy[size_t(r * n + j)];
    EXPECT_NEAR(db[size_t(j)], sum, 1e-4) << j;
    for (int64_t c = 0; c < k; ++c) {
      double w = 0.25;
      for (int64_t r = 0; r < rows; ++r) w += double(dy[size_t(r * n + j)]) * x[size_t(r * k + c)];
      EXPECT_NEAR(dw[size_t(j * k + c)], w, 1e-4) << j << ", " << c;
    }
  }
}

TEST(CudaMatmulEngine, StridedBatchesEqualOneGemmPerMatrix) {
  REQUIRE_CUDA_DEVICE();
  const int64_t batch = 6, m = 17, n = 17, k = 16;  // attention's q k^T shape: (T, hs) x (T, hs)^T
  const auto a = normal(size_t(batch * m * k), 6), b = normal(size_t(batch * n * k), 7);
  CudaBuffer da = CudaBuffer::from_vector(a), db = CudaBuffer::from_vector(b), dc(size_t(batch * m * n) * 4);
  CudaMatmulEngine engine(nullptr);
  CudaMatmul mm = fp32_gemm(da, Transpose::NO, db, Transpose::YES, dc, m, n, k);
  mm.batch = batch;
  mm.stride_a = m * k;
  mm.stride_b = n * k;
  mm.stride_c = m * n;
  engine.run(mm);
  QSYNC_CUDA_CHECK(cudaDeviceSynchronize());
  const auto c = dc.download_vector<float>(size_t(batch * m * n));
  for (int64_t i = 0; i < batch; ++i) {
    const std::vector<float> ai(a.begin() + i * m * k, a.begin() + (i + 1) * m * k);
    const std::vector<float> bi(b.begin() + i * n * k, b.begin() + (i + 1) * n * k);
    const auto ref = reference(ai, bi, m, n, k);
    for (int64_t e = 0; e < m * n; ++e) EXPECT_NEAR(c[size_t(i * m * n + e)], ref[size_t(e)], 1e-4) << i << " " << e;
  }
}

TEST(CudaMatmulEngine, CachesOnePlanPerDistinctGemmAndRepeatsBitForBit) {
  REQUIRE_CUDA_DEVICE();
  const int64_t m = 64, n = 96, k = 1024;  // long k: where split-k reductions would change the sums
  const auto a = normal(size_t(m * k), 8), b = normal(size_t(n * k), 9);
  CudaBuffer da = CudaBuffer::from_vector(a), db = CudaBuffer::from_vector(b), dc(size_t(m * n) * 4);
  CudaMatmulEngine engine(nullptr);
  CudaMatmul mm = fp32_gemm(da, Transpose::NO, db, Transpose::YES, dc, m, n, k);
  std::vector<float> first;
  for (int run = 0; run < 3; ++run) {
    engine.run(mm);
    QSYNC_CUDA_CHECK(cudaDeviceSynchronize());
    const auto c = dc.download_vector<float>(size_t(m * n));
    if (run == 0) first = c;
    else EXPECT_EQ(c, first) << "run " << run << " differs from the first";
  }
  EXPECT_EQ(engine.cached_plans(), 1u);
  CudaMatmul other = fp32_gemm(da, Transpose::NO, db, Transpose::YES, dc, m, n, k / 2);
  engine.run(other);
  EXPECT_EQ(engine.cached_plans(), 2u);
}

}  // namespace
}  // namespace qsync
