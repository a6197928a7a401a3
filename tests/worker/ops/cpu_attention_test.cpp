// File: tests/worker/ops/cpu_attention_test.cpp
// CpuOps' attention score part against its plain-loop oracle (attention_forward_ref /
// attention_backward_ref) over awkward shapes: one token, head sizes 1 and 5, token counts that
// fill no vector (17, 33) or no block of rows (3), head sizes that take the kernels' 8- and
// 16-channel paths (8, 24), the ViT's (16 tokens, 4 heads of 16) and the char-GPT's (64 tokens, 4
// heads of 32), sizes that take every step of the AVX-512 kernels' 32-, 16-, 8- and 1-lane ladder
// (40 and 49 tokens, heads of 40 and 56), causal and not, on 1 and 2 threads, at every ISA level
// (eight lanes and sixteen). The gradients must be bit for bit the oracle's (the vectorized
// version adds the same products in the same order at either width). The forward differs from the oracle only by its
// exponentials (libmvec's vector expf against std::exp, each within an ulp or two; the row sum each score is divided by
// adds up to T of those differences, partly cancelling): tolerance 1e-6 relative on every score and 1e-6 * max|v| on
// the outputs (an output is a convex combination of v rows). Measured over these shapes (glibc 2.36): at worst 4.1e-7
// relative on a score (64 tokens) and 1.1e-7 * max|v| on an output; the margins are empirical, not bounds.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu_isa.h"
#include "worker/model.h"
#include "worker/ops/cpu/cpu_kernels.h"
#include "worker/ops/cpu_ops.h"

namespace qsync {
namespace {

Tensor random_tensor(const Shape& s, uint32_t seed) {
  Tensor t = Tensor::empty(s, Precision::FP32, nullptr);
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 2.0f);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = d(rng);
  return t;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() && std::memcmp(a.f32(), b.f32(), size_t(a.numel()) * sizeof(float)) == 0;
}

double max_relative_difference(const Tensor& a, const Tensor& b) {
  double worst = 0.0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double x = a.f32()[i], y = b.f32()[i];
    if (x != y) worst = std::max(worst, std::fabs(x - y) / std::max(std::fabs(x), std::fabs(y)));
  }
  return worst;
}

double max_absolute_difference(const Tensor& a, const Tensor& b) {
  double worst = 0.0;
  for (int64_t i = 0; i < a.numel(); ++i) worst = std::max(worst, std::fabs(double(a.f32()[i]) - b.f32()[i]));
  return worst;
}

TEST(CpuAttention, MatchesThePlainLoops) {
  const std::vector<AttentionShape> shapes = {
      {1, 1, 4, 1, true},    {2, 17, 12, 3, true},   {2, 17, 12, 3, false}, {3, 33, 10, 2, true},
      {1, 5, 3, 3, false},   {2, 19, 48, 2, true},   {3, 10, 16, 2, false}, {2, 3, 32, 1, true},
      {2, 14, 48, 2, true},  {1, 6, 24, 1, true},    {2, 3, 10, 1, true},   {1, 19, 40, 2, false},
      {4, 64, 128, 4, true}, {2, 64, 128, 4, false}, {3, 16, 64, 4, false}, {2, 40, 80, 2, false},
      {2, 40, 80, 2, true},  {1, 49, 56, 1, true},   {1, 49, 56, 1, false}};
  struct Restore {  // the default cap (none: AMX) and thread count come back after the test
    int threads = omp_get_max_threads();
    ~Restore() {
      cpu_isa_set_cap(CpuIsa::AMX);
      omp_set_num_threads(threads);
    }
  } restore;
  for (const CpuIsa isa : {CpuIsa::SCALAR, CpuIsa::AVX2, CpuIsa::AVX512}) {
    if (isa > cpu_isa_detected()) {
      std::printf("[ SKIPPED  ] the %s level: this CPU lacks it\n", cpu_isa_name(isa));
      continue;
    }
    cpu_isa_set_cap(isa);
    for (int threads : {1, 2}) {
      omp_set_num_threads(threads);
      for (const AttentionShape& s : shapes) {
        const int64_t B = s.batch, T = s.tokens, C = s.width, H = s.heads;
        const std::string what = "B" + std::to_string(B) + " T" + std::to_string(T) + " C" + std::to_string(C) + " H" +
                                 std::to_string(H) + (s.causal ? " causal" : "") + ", threads " +
                                 std::to_string(threads) + ", " + cpu_isa_name(isa);
        const Tensor qkv = random_tensor({B, T, 3 * C}, uint32_t(T * 31 + C));
        const Tensor dout = random_tensor({B, T, C}, uint32_t(T * 17 + H));
        Tensor att = Tensor::empty({B, H, T, T}, Precision::FP32, nullptr),
               out = Tensor::empty({B, T, C}, Precision::FP32, nullptr);
        Tensor att_ref = Tensor::empty({B, H, T, T}, Precision::FP32, nullptr);
        Tensor out_ref = Tensor::empty({B, T, C}, Precision::FP32, nullptr);
        StepContext ctx;
        cpu_ops().attention_forward(qkv, s, false, att, out, ctx, "att");
        attention_forward_ref(qkv, s, att_ref, out_ref);
        EXPECT_LE(max_relative_difference(att, att_ref), 1e-6) << "scores, " << what;
        float max_v = 0.0f;
        for (int64_t r = 0; r < B * T; ++r)
          for (int64_t i = 0; i < C; ++i) max_v = std::max(max_v, std::fabs(qkv.f32()[r * 3 * C + 2 * C + i]));
        EXPECT_LE(max_absolute_difference(out, out_ref), 1e-6 * max_v) << "output, " << what;
        Tensor dqkv = random_tensor({B, T, 3 * C}, 1), dqkv_ref = random_tensor({B, T, 3 * C}, 2);  // overwritten
        cpu_ops().attention_backward(qkv, att_ref, dout, s, false, dqkv, ctx, "att");
        attention_backward_ref(qkv, att_ref, dout, s, dqkv_ref);
        EXPECT_TRUE(same_bits(dqkv, dqkv_ref)) << "gradient, " << what;
      }
    }
  }
}

}  // namespace
}  // namespace qsync
