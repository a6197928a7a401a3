// File: tests/worker/ops/cpu_layernorm_test.cpp
// CpuOps' layer norm (rows summed side by side in groups) against its plain per-row loops
// (layernorm_rows_ref / layernorm_backward_ref) over awkward shapes: one row, row counts below,
// at and around the group of 8 (7, 8, 9, 17), one channel, odd channel counts (3, 33), rows past
// one chunk of the gain and bias sums and not a multiple of it or of the group (300: chunks of
// 128, 128, 44) and the char-GPT's (2048 rows of 128), on 1, 2 and 3 threads. Tolerance: none, every output must be bit
// for bit the oracle's (the same adds in the same order for every row).
#include <gtest/gtest.h>

#include <omp.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "worker/ops/cpu/cpu_kernels.h"
#include "worker/ops/cpu_ops.h"

namespace qsync {
namespace {

Tensor random_tensor(const Shape& s, uint32_t seed, float mean = 0.0f) {
  Tensor t = Tensor::empty(s, Precision::FP32, nullptr);
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(mean, 2.0f);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = d(rng);
  return t;
}

bool same_bits(const float* a, const float* b, int64_t n) { return std::memcmp(a, b, size_t(n) * sizeof(float)) == 0; }

TEST(CpuLayerNorm, MatchesThePlainLoopsBitForBit) {
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{1, 4},     {7, 3},    {8, 1},     {9, 33},
                                                          {17, 128}, {300, 33}, {2048, 128}};
  const int threads_before = omp_get_max_threads();
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    for (const auto& [R, C] : shapes) {
      const std::string what = std::to_string(R) + " rows of " + std::to_string(C) + ", threads " + std::to_string(threads);
      const Tensor x = random_tensor({R, C}, uint32_t(R * 7 + C), 3.0f);  // off-centre: the mean matters
      const Tensor w = random_tensor({C}, uint32_t(C)), b = random_tensor({C}, uint32_t(C + 1));
      Tensor y = Tensor::empty({R, C}, Precision::FP32, nullptr), xhat = Tensor::empty({R, C}, Precision::FP32, nullptr);
      Tensor rstd = Tensor::empty({R}, Precision::FP32, nullptr);
      std::vector<float> y_ref(static_cast<size_t>(R * C)), xhat_ref(y_ref.size()), rstd_ref(static_cast<size_t>(R));
      cpu_ops().layernorm_forward(x, w, b, LAYERNORM_EPS, y, &xhat, &rstd);
      layernorm_rows_ref(x.f32(), w.f32(), b.f32(), R, C, y_ref.data(), xhat_ref.data(), rstd_ref.data());
      EXPECT_TRUE(same_bits(y.f32(), y_ref.data(), R * C)) << "output, " << what;
      EXPECT_TRUE(same_bits(xhat.f32(), xhat_ref.data(), R * C)) << "normalized input, " << what;
      EXPECT_TRUE(same_bits(rstd.f32(), rstd_ref.data(), R)) << "reciprocal std, " << what;

      const Tensor dy = random_tensor({R, C}, uint32_t(R + C));
      Tensor dx = random_tensor({R, C}, 5);  // overwritten
      Tensor dw = random_tensor({C}, 6), db = random_tensor({C}, 7);  // added to
      std::vector<float> dx_ref(static_cast<size_t>(R * C)), dw_ref(dw.f32(), dw.f32() + C), db_ref(db.f32(), db.f32() + C);
      cpu_ops().layernorm_backward(dy, xhat, rstd, w, dx, dw, db);
      layernorm_backward_ref(dy.f32(), xhat.f32(), rstd.f32(), w.f32(), R, C, dx_ref.data(), dw_ref.data(), db_ref.data());
      EXPECT_TRUE(same_bits(dx.f32(), dx_ref.data(), R * C)) << "input gradient, " << what;
      EXPECT_TRUE(same_bits(dw.f32(), dw_ref.data(), C)) << "weight gradient, " << what;
      EXPECT_TRUE(same_bits(db.f32(), db_ref.data(), C)) << "bias gradient, " << what;
    }
  }
  omp_set_num_threads(threads_before);
}

}  // namespace
}  // namespace qsync
