// File: worker/ops/cpu/conv_bias_grad.cpp
// The convolution's bias gradient pass (conv_bias_grad_add, cpu_kernels.h): one read of the
// output gradient that sums it per channel, finds its amax for an INT8 cast, and (where the
// layer's cast of the gradient is a plain 16-bit conversion) writes that conversion, so the
// backward reads the FP32 gradient once.
#ifdef __AVX2__
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <vector>

#include "worker/ops/cpu/cpu_kernels.h"

namespace qsync {
namespace {

// Positions of a plane converted at a time, from an L1 buffer of the summed values (a multiple of
// 8, so the lanes below see the same positions as without chunks).
constexpr int64_t PLANE_CHUNK = 2048;

}  // namespace

// Per (sample, channel) plane eight interleaved lane sums (lane j adds positions j, j + 8, ...; a
// fixed order, vectorized), added pairwise; then each channel's plane sums are added to db sample
// by sample. Threads take runs of whole planes in memory order (reads in sequence; owning whole
// channels instead, a thread read 4 KiB pages a plane apart), and the sums into db follow in one
// fixed order: the same bits at any count. The CUDA kernel adds in the same order
// (kernels/cuda/conv_cuda.cu, PlaneSums): the same bits.
float conv_bias_grad_add(const float* dy, const uint8_t* mask, int64_t batch, int64_t o, int64_t hw, float* db,
                         Precision to, uint16_t* converted) {
  if (converted != nullptr) require_sixteen_bit(to, "conv_bias_grad_add");
  std::vector<float> plane_sum(size_t(batch * o)), plane_amax(size_t(batch * o));  // (B, O)
#pragma omp parallel for schedule(static) if (batch * o * hw > (1 << 16))
  for (int64_t so = 0; so < batch * o; ++so) {
    alignas(64) float summed[PLANE_CHUNK];  // (chunk) the values summed, mask applied, to convert
    const float* plane = dy + so * hw;
    const uint8_t* on = mask != nullptr ? mask + so * hw : nullptr;
    uint16_t* out = converted != nullptr ? converted + so * hw : nullptr;
    const bool buffered = out != nullptr && on != nullptr;  // unmasked values convert from dy itself
    float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0}, lane_max[8] = {0, 0, 0, 0, 0, 0, 0, 0};
#ifdef __AVX2__
    // The eight lanes in one vector: masked-out values are +0 (a bitwise and). max(v, m) keeps
    // m when v is NaN.
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 acc = _mm256_setzero_ps(), top = _mm256_setzero_ps();
#endif
    for (int64_t q = 0; q < hw; q += PLANE_CHUNK) {
      const int64_t n = std::min(PLANE_CHUNK, hw - q), full = n & ~int64_t{7};
      const float* x = plane + q;
      const uint8_t* m = on != nullptr ? on + q : nullptr;
      int64_t i = 0;
#ifdef __AVX2__
      for (; i < full; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        if (m != nullptr) {
          const __m256i k = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(m + i)));
          v = _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_cmpgt_epi32(k, _mm256_setzero_si256())));
        }
        acc = _mm256_add_ps(acc, v);
        top = _mm256_max_ps(_mm256_and_ps(v, abs_mask), top);
        if (buffered) _mm256_store_ps(summed + i, v);
      }
#else
      for (; i < full; i += 8)
        for (int j = 0; j < 8; ++j) {
          const float v = m == nullptr || m[i + j] != 0 ? x[i + j] : 0.0f;
          lane[j] += v;
          lane_max[j] = std::fabs(v) > lane_max[j] ? std::fabs(v) : lane_max[j];
          if (buffered) summed[i + j] = v;
        }
#endif
      if (out == nullptr) continue;
      if (buffered)
        for (int64_t t = i; t < n; ++t) summed[t] = m[t] != 0 ? x[t] : 0.0f;  // the plane's tail
      convert_to_sixteen_bit(buffered ? summed : x, out + q, n, to);
    }
#ifdef __AVX2__
    _mm256_storeu_ps(lane, acc);
    _mm256_storeu_ps(lane_max, top);
#endif
    for (int64_t p = hw & ~int64_t{7}, j = 0; p < hw; ++p, ++j) {  // the tail, after the lanes' vector part
      const float v = on == nullptr || on[p] != 0 ? plane[p] : 0.0f;
      lane[j] += v;
      lane_max[j] = std::fabs(v) > lane_max[j] ? std::fabs(v) : lane_max[j];
    }
    plane_sum[size_t(so)] = ((lane[0] + lane[4]) + (lane[1] + lane[5])) + ((lane[2] + lane[6]) + (lane[3] + lane[7]));
    float amax = 0.0f;
    for (float v : lane_max) amax = v > amax ? v : amax;
    plane_amax[size_t(so)] = amax;
  }
  for (int64_t s = 0; s < batch; ++s)
    for (int64_t oc = 0; oc < o; ++oc) db[oc] += plane_sum[size_t(s * o + oc)];
  float amax = 0.0f;
  for (float m : plane_amax) amax = m > amax ? m : amax;
  return amax;
}

}  // namespace qsync
