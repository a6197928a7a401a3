// Unit test of the cpu GEMM backend's FP32 and BF16 slices (kernels/cpu/gemm_float_slices.h):
// which products split over the threads, along C's rows or columns or along K, and that a split
// product on three threads is the reference's within the FP32 accumulation order, in every
// transpose case, with beta and with a bias, on padded strides. Runs as the test device class
// (tests/kernels/test_device_class.h): where BF16 is not native it is decoded to FP32 first and
// takes FP32's rule.
#include <gtest/gtest.h>
#include <omp.h>

#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/gemm_float_slices.h"
#include "kernels/gemm_registry.h"
#include "kernels/ref/gemm_ref.h"
#include "tests/kernels/gemm_test_support.h"
#include "tests/kernels/test_device_class.h"

namespace qsync {
namespace {

using onednn_matmul::dt;
using onednn_matmul::float_slices;
using onednn_matmul::FloatSlices;
using onednn_matmul::MatmulKey;
using Side = FloatSlices::Side;

FloatSlices slices_of(dt type, int64_t m, int64_t n, int64_t k, bool ta, int threads) {
  const MatmulKey key{type, type, m, n, k, ta, false, ta ? m : k, n, n, -1, 0.0f};
  return float_slices(key, threads);
}

void expect_split(const FloatSlices& s, int count, Side side) {
  EXPECT_EQ(s.count, count);
  EXPECT_EQ(int(s.side), int(side));
}

// K of twice C's longer side and more (a weight gradient): along K, in any layout. Else BF16
// along the longer side of C, whatever the layout; FP32 along rows with A as stored only. Whole
// below 4 M multiply-adds, on one thread, for INT8 (its own slices), where the side holds fewer
// vectors of 16 than there are threads; a K under 2 x 256 is not split.
TEST(GemmFloatSlices, WhichProductsSplitAndAlongWhichSide) {
  expect_split(slices_of(dt::bf16, 2048, 128, 512, false, 2), 2, Side::ROWS);
  expect_split(slices_of(dt::bf16, 128, 512, 2048, true, 2), 2, Side::DEPTH);  // a weight gradient
  expect_split(slices_of(dt::bf16, 128, 512, 1000, true, 2), 2, Side::COLUMNS);
  expect_split(slices_of(dt::f32, 2048, 512, 128, false, 3), 3, Side::ROWS);
  expect_split(slices_of(dt::f32, 128, 128, 4096, false, 2), 2, Side::DEPTH);
  expect_split(slices_of(dt::f32, 512, 128, 2048, true, 2), 2, Side::DEPTH);  // transposed A too
  EXPECT_EQ(slices_of(dt::f32, 512, 128, 1000, true, 2).count, 1);             // transposed A: rows only
  EXPECT_EQ(slices_of(dt::f32, 128, 1024, 784, false, 2).count, 1);  // more columns than rows
  EXPECT_EQ(slices_of(dt::bf16, 2048, 128, 8, false, 2).count, 1);   // 2 M multiply-adds
  EXPECT_EQ(slices_of(dt::bf16, 2048, 128, 512, false, 1).count, 1);
  EXPECT_EQ(slices_of(dt::s8, 2048, 128, 512, false, 2).count, 1);
  expect_split(slices_of(dt::bf16, 20, 20, 20000, false, 3), 3, Side::DEPTH);
  expect_split(slices_of(dt::bf16, 20, 700, 400, false, 3), 3, Side::COLUMNS);
  EXPECT_EQ(slices_of(dt::bf16, 16, 16, 20000, false, 3).count, 3);
  EXPECT_EQ(slices_of(dt::bf16, 64, 64, 1000, false, 2).count, 1);     // under 2^22 multiply-adds
  expect_split(slices_of(dt::bf16, 128, 128, 300, false, 2), 2, Side::ROWS);  // K under 2 x 256
}

// 333 x 40 (row slices of 112, 112 and 109 on three threads) and 40 x 333 (column slices for BF16,
// whole for FP32), K of 400; 48 x 40 with K of 4100 (depth slices of 1376, 1376 and 1348): past
// 4 M multiply-adds. Tolerance: both sides sum exact products
// (FP32 or BF16 operands) in FP32 and double, so they differ by the FP32 accumulation order alone,
// NMSE ~ k 2^-48 ~ 1e-12; 1e-9 as gemm_backend_test.
TEST(GemmFloatSlices, SlicedProductsOnThreeThreadsMatchTheReference) {
  const DeviceClass& device = testing::activate_test_device_class();
  const GemmBackend& cpu = gemm_backend_by_name("cpu");
  const int default_threads = omp_get_max_threads();
  omp_set_num_threads(3);
  const Transpose layouts[][2] = {{Transpose::NO, Transpose::YES},
                                  {Transpose::NO, Transpose::NO},
                                  {Transpose::YES, Transpose::NO},
                                  {Transpose::YES, Transpose::YES}};
  const int64_t pad = 3;
  uint32_t seed = 500;
  for (const Precision p : {Precision::FP32, Precision::BF16})
    for (const testing::Shape s :
         {testing::Shape{333, 40, 400}, testing::Shape{40, 333, 400}, testing::Shape{48, 40, 4100}})
      for (const auto& t : layouts)
        for (const bool with_bias : {false, true}) {
          SCOPED_TRACE(device.name + " " + precision_name(p) + " " + std::to_string(s.m) + "x" +
                       std::to_string(s.n) + " " + testing::transpose_case_name(t[0], t[1]) +
                       (with_bias ? " bias" : " beta 0.5"));
          const bool a_t = t[0] == Transpose::YES, b_t = t[1] == Transpose::YES;
          std::mt19937 rng(seed++);
          auto a = testing::make_operand(p, t[0], a_t ? s.k : s.m, a_t ? s.m : s.k, (a_t ? s.m : s.k) + pad,
                                         ScaleMode::NONE, rng, !a_t);
          auto b = testing::make_operand(p, t[1], b_t ? s.n : s.k, b_t ? s.k : s.n, (b_t ? s.k : s.n) + pad,
                                         ScaleMode::NONE, rng, b_t);
          std::normal_distribution<float> dist;
          std::vector<float> bias(size_t(s.n)), c0(size_t(s.m * (s.n + pad)));
          for (float& v : bias) v = dist(rng);
          for (float& v : c0) v = dist(rng);
          std::vector<float> got = c0, want = c0;
          GemmDesc d = testing::gemm_desc(s, a, b, s.n + pad, with_bias ? 0.0f : 0.5f,
                                          with_bias ? bias.data() : nullptr);
          d.c = want.data();
          gemm_ref(d);
          d.c = got.data();
          cpu.gemm(d);
          EXPECT_LT(testing::nmse(got.data(), want.data(), s.m, s.n, s.n + pad), 1e-9);
          for (int64_t i = 0; i < s.m; ++i)  // the padding between rows is never written
            for (int64_t j = s.n; j < s.n + pad; ++j)
              ASSERT_EQ(got[size_t(i * (s.n + pad) + j)], c0[size_t(i * (s.n + pad) + j)]) << i << ", " << j;
        }
  omp_set_num_threads(default_threads);
}

}  // namespace
}  // namespace qsync
