// Unit test of the cpu GEMM backend's INT8 slices (kernels/cpu/gemm_onednn.cpp): products with
// few rows and many columns run as one single-threaded oneDNN call per thread over a slice of C's
// columns (column_sliced); products with a long K as one per thread over a slice of K, in int32,
// added and scaled after (k_sliced). The int32 sums are exact and the epilogues are per entry, so
// three threads must give the bits of one, and both must be the reference's within the one
// rounding of the scales: with scales per tensor, column and row, u8 and 7-bit A (the u8 +
// zero-point path of CPUs without VNNI), beta and a bias, in every transpose case. Runs as the
// test device class (tests/kernels/test_device_class.h); CMake registers it again as the classes
// without VNNI.
#include <gtest/gtest.h>
#include <omp.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu_isa.h"
#include "kernels/gemm_registry.h"
#include "tests/kernels/gemm_test_support.h"
#include "tests/kernels/test_device_class.h"

namespace qsync {
namespace {

struct Int8Case {
  std::string name;
  ScaleMode a_mode, b_mode;
  bool a_unsigned;
  float a_quant_max;  // 0: the full range
};

// Three threads against one, and against the ref backend, on shape s.
void check_slices(const testing::Shape& s, uint32_t seed) {
  const DeviceClass& device = testing::activate_test_device_class();
  const GemmBackend& cpu = gemm_backend_by_name("cpu");
  const GemmBackend& ref = gemm_backend_by_name("ref");
  const Int8Case cases[] = {
      {"tensor", ScaleMode::PER_TENSOR, ScaleMode::PER_TENSOR, false, 0.0f},
      {"column", ScaleMode::PER_TENSOR, ScaleMode::PER_CHANNEL, false, 0.0f},
      {"row", ScaleMode::PER_CHANNEL, ScaleMode::PER_TENSOR, false, 0.0f},
      {"u8_column", ScaleMode::PER_TENSOR, ScaleMode::PER_CHANNEL, true, 127.0f},
      {"7bit_column", ScaleMode::PER_TENSOR, ScaleMode::PER_CHANNEL, false, 63.0f},
  };
  const Transpose layouts[][2] = {{Transpose::NO, Transpose::YES},
                                  {Transpose::NO, Transpose::NO},
                                  {Transpose::YES, Transpose::NO},
                                  {Transpose::YES, Transpose::YES}};
  const int64_t pad = 3;
  for (const Int8Case& pc : cases)
    for (const auto& t : layouts) {
      const bool a_t = t[0] == Transpose::YES, b_t = t[1] == Transpose::YES;
      std::mt19937 rng(seed++);
      auto a = testing::make_operand(Precision::INT8, t[0], a_t ? s.k : s.m, a_t ? s.m : s.k, (a_t ? s.m : s.k) + pad,
                                     pc.a_mode, rng, !a_t, pc.a_unsigned, pc.a_quant_max);
      auto b = testing::make_operand(Precision::INT8, t[1], b_t ? s.n : s.k, b_t ? s.k : s.n, (b_t ? s.k : s.n) + pad,
                                     pc.b_mode, rng, b_t);
      std::vector<float> bias(size_t(s.n)), c0(size_t(s.m * (s.n + pad)));
      std::normal_distribution<float> dist;
      for (float& v : bias) v = dist(rng);
      for (float& v : c0) v = dist(rng);
      for (const bool with_bias : {false, true}) {
        SCOPED_TRACE(device.name + " " + pc.name + " " + testing::transpose_case_name(t[0], t[1]) +
                     (with_bias ? " bias" : " beta 0.5"));
        std::vector<float> out[3] = {c0, c0, c0};  // three threads, one, the ref backend
        for (int run = 0; run < 3; ++run) {
          omp_set_num_threads(run == 0 ? 3 : 1);
          GemmDesc d = testing::gemm_desc(s, a, b, s.n + pad, with_bias ? 0.0f : 0.5f,
                                          with_bias ? bias.data() : nullptr);
          d.c = out[run].data();
          (run == 2 ? ref : cpu).gemm(d);
        }
        // Without VNNI a full-range s8 A is decoded to FP32 (no slices; oneDNN's FP32 threads may
        // split K): only the reference check below applies.
        const bool decoded = cpu_isa_active() < CpuIsa::AVX512 && !pc.a_unsigned && pc.a_quant_max == 0.0f;
        if (!decoded) {
          EXPECT_EQ(std::memcmp(out[0].data(), out[1].data(), out[0].size() * sizeof(float)), 0);
        }
        EXPECT_NE(std::memcmp(out[0].data(), c0.data(), c0.size() * sizeof(float)), 0);  // it ran
        // Exact int32 sums; the scales, beta and bias round once each (as gemm_backend_test).
        EXPECT_LT(testing::nmse(out[1].data(), out[2].data(), s.m, s.n, s.n + pad), 1e-12);
      }
    }
}

// 300 columns of 32 rows: column slices of 112, 112 and 76 (whole vectors but the last); over the
// 4 M multiply-adds below which a product is left whole, K shorter than twice the columns.
TEST(GemmInt8Slices, ColumnSlicesOnThreeThreadsGiveTheBitsOfOne) { check_slices({32, 300, 600}, 2000); }

// K of 2501 (at least twice the rows and columns): slices of 836, 836 and 829 multiply-adds
// (groups of 4 but the last), an odd K with its last group short.
TEST(GemmInt8Slices, KSlicesOnThreeThreadsGiveTheBitsOfOne) { check_slices({48, 40, 2501}, 3000); }

}  // namespace
}  // namespace qsync
