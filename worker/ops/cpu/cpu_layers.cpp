// File: worker/ops/cpu/cpu_layers.cpp
// CpuOps: token + position embeddings, max pooling and global average pooling (layer norm:
// cpu_layernorm.cpp). Forward beside backward.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

#include "kernels/cpu/simd_dispatch.h"
#include "worker/ops/cpu/cpu_kernels.h"
#include "worker/ops/cpu_ops.h"

namespace qsync {

// ---------------------------------------------------------------------------------------------
// Embedding

void CpuOps::embedding_ids(const Tensor& x, int64_t vocab, Tensor& ids, const std::string& layer) {
  const int64_t T = x.rank() > 1 ? x.dim(1) : 1, n = x.numel();
  // Serially: the error names the first bad position.
  const float* xp = x.f32();
  int32_t* ip = ids.as<int32_t>();
  for (int64_t i = 0; i < n; ++i) {
    const float v = xp[i];
    if (!(v >= 0.0f && v < float(vocab)) || v != std::floor(v))
      throw std::invalid_argument("layer '" + layer + "': token id " + std::to_string(v) + " at (batch " +
                                  std::to_string(i / T) + ", position " + std::to_string(i % T) +
                                  ") is not an integer in [0, " + std::to_string(vocab) +
                                  "); check the data's vocabulary against the model's input.vocab");
    ip[i] = int32_t(v);
  }
}

void CpuOps::embedding_forward(const Tensor& ids, const Tensor& wte_t, const Tensor& wpe_t, Tensor& y) {
  const int64_t B = ids.dim(0), T = ids.dim(1), C = wpe_t.dim(1);
  const int32_t* ip = ids.as<int32_t>();
  const float* wte = wte_t.f32();
  const float* wpe = wpe_t.f32();
  float* yp = y.f32();
#pragma omp parallel for if (B * T * C > (1 << 16))
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const float* e = wte + int64_t(ip[b * T + t]) * C;
      const float* p = wpe + t * C;
      float* out = yp + (b * T + t) * C;
      for (int64_t c = 0; c < C; ++c) out[c] = e[c] + p[c];
    }
}

void CpuOps::embedding_backward(const Tensor& dy, const Tensor& ids, Tensor& dwte_t, Tensor& dwpe_t) {
  const int64_t B = ids.dim(0), T = ids.dim(1), C = dwpe_t.dim(1);
  const float* dyp = dy.f32();
  const int32_t* ip = ids.as<int32_t>();
  // Token table: rows collide when ids repeat, so one pass in (b, t) order.
  float* dwte = dwte_t.f32();
  for (int64_t i = 0; i < B * T; ++i) {
    float* row = dwte + int64_t(ip[i]) * C;
    const float* g = dyp + i * C;
    for (int64_t c = 0; c < C; ++c) row[c] += g[c];
  }
  // Position table: each t owned by one thread, batch summed in order.
  float* dwpe = dwpe_t.f32();
#pragma omp parallel for if (B * T * C > (1 << 16))
  for (int64_t t = 0; t < T; ++t)
    for (int64_t b = 0; b < B; ++b) {
      const float* g = dyp + (b * T + t) * C;
      for (int64_t c = 0; c < C; ++c) dwpe[t * C + c] += g[c];
    }
}

// ---------------------------------------------------------------------------------------------
// MaxPool2d: padded cells never win; ties go to the first cell in row-major window order

namespace {

// Max pooling's comparison: v replaces the best so far when larger, or when it is NaN and the
// best is not (NaN propagates, as in PyTorch); ties keep the first.
inline void maxpool_take(float v, int32_t index, float& best, int32_t& best_index) {
  const bool better = v > best || (v != v && best == best);
  best = better ? v : best;
  best_index = better ? index : best_index;
}

// One output row of 2x2 windows at stride 2, plainly: r0, r1 the two input rows, i0 the flat
// index of r0[0] in its plane, W the plane's width. The general loop's candidates in its order.
void maxpool_2x2_row(const float* r0, const float* r1, int64_t Wo, int32_t i0, int32_t W, float* out, int32_t* arg) {
  for (int64_t ow = 0; ow < Wo; ++ow) {
    const int32_t i = i0 + int32_t(2 * ow);
    float best = r0[2 * ow];
    int32_t best_index = i;
    maxpool_take(r0[2 * ow + 1], i + 1, best, best_index);
    maxpool_take(r1[2 * ow], i + W, best, best_index);
    maxpool_take(r1[2 * ow + 1], i + W + 1, best, best_index);
    out[ow] = best;
    if (arg != nullptr) arg[ow] = best_index;
  }
}

// The even and odd lanes of the 16 values at lo, hi (8 each): [v0 v2 .. v14], [v1 v3 .. v15].
QSYNC_TARGET_AVX2 inline void split_even_odd(__m256 lo, __m256 hi, __m256& even, __m256& odd) {
  // shuffle_ps works within 128-bit halves: [v0 v2 v8 v10 | v4 v6 v12 v14]; then 64-bit blocks 0 2 1 3
  even = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0))),
                                                _MM_SHUFFLE(3, 1, 2, 0)));
  odd = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1))),
                                               _MM_SHUFFLE(3, 1, 2, 0)));
}

// maxpool_take on 8 windows: v replaces best where larger, or NaN where best is not.
QSYNC_TARGET_AVX2 inline void take8(__m256 v, __m256i index, __m256& best, __m256i& best_index) {
  const __m256 better = _mm256_or_ps(_mm256_cmp_ps(v, best, _CMP_GT_OQ),
                                     _mm256_and_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q), _mm256_cmp_ps(best, best, _CMP_ORD_Q)));
  best = _mm256_blendv_ps(best, v, better);
  best_index = _mm256_castps_si256(
      _mm256_blendv_ps(_mm256_castsi256_ps(best_index), _mm256_castsi256_ps(index), better));
}

// maxpool_2x2_row eight windows at a time (a lane per window, the same comparisons in the same
// order: the same bits), the last few through masked loads and stores.
QSYNC_TARGET_AVX2 void maxpool_2x2_row_avx2(const float* r0, const float* r1, int64_t Wo, int32_t i0, int32_t W,
                                            float* out, int32_t* arg) {
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (int64_t ow = 0; ow < Wo; ow += 8) {
    const int64_t n = std::min<int64_t>(8, Wo - ow);  // windows: 2n values of each row
    const __m256i in_lo = _mm256_cmpgt_epi32(_mm256_set1_epi32(int32_t(2 * n)), lanes);
    const __m256i in_hi = _mm256_cmpgt_epi32(_mm256_set1_epi32(int32_t(2 * n - 8)), lanes);
    const __m256i live = _mm256_cmpgt_epi32(_mm256_set1_epi32(int32_t(n)), lanes);
    __m256 e0, o0, e1, o1;
    split_even_odd(_mm256_maskload_ps(r0 + 2 * ow, in_lo), _mm256_maskload_ps(r0 + 2 * ow + 8, in_hi), e0, o0);
    split_even_odd(_mm256_maskload_ps(r1 + 2 * ow, in_lo), _mm256_maskload_ps(r1 + 2 * ow + 8, in_hi), e1, o1);
    const __m256i first = _mm256_add_epi32(_mm256_set1_epi32(i0 + int32_t(2 * ow)), _mm256_add_epi32(lanes, lanes));
    __m256 best = e0;
    __m256i best_index = first;
    take8(o0, _mm256_add_epi32(first, _mm256_set1_epi32(1)), best, best_index);
    take8(e1, _mm256_add_epi32(first, _mm256_set1_epi32(W)), best, best_index);
    take8(o1, _mm256_add_epi32(first, _mm256_set1_epi32(W + 1)), best, best_index);
    _mm256_maskstore_ps(out + ow, live, best);
    if (arg != nullptr) _mm256_maskstore_epi32(arg + ow, live, best_index);
  }
}

}  // namespace

// 2x2 windows at stride 2 without padding (the zoo CNN's pooling): the general loop's candidates
// in its order, without its bounds checks; eight windows at once with AVX2. planes (N, H, W) ->
// y, argmax (N, Ho, Wo).
void maxpool_2x2(const float* x, int64_t planes, int64_t H, int64_t W, int64_t Ho, int64_t Wo, float* y,
                 int32_t* argmax, bool vectors) {
  const auto row = vectors ? maxpool_2x2_row_avx2 : maxpool_2x2_row;
#pragma omp parallel for schedule(static) if (planes * H * W > (1 << 16))
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t oh = 0; oh < Ho; ++oh) {
      const float* r0 = x + p * H * W + 2 * oh * W;
      int32_t* arg = argmax != nullptr ? argmax + (p * Ho + oh) * Wo : nullptr;
      row(r0, r0 + W, Wo, int32_t(2 * oh * W), int32_t(W), y + (p * Ho + oh) * Wo, arg);
    }
}

void CpuOps::maxpool_forward(const Tensor& x, const PoolGeometry& g, Tensor& y, Tensor* argmax) {
  const int64_t B = x.dim(0), C = g.c, H = g.h, W = g.w, Ho = g.oh, Wo = g.ow;
  const int64_t K = g.kernel, S = g.stride, P = g.pad;
  int32_t* ap = argmax != nullptr ? argmax->as<int32_t>() : nullptr;
  const float* xp = x.f32();
  float* yp = y.f32();
  if (K == 2 && S == 2 && P == 0) {
    maxpool_2x2(xp, B * C, H, W, Ho, Wo, yp, ap, simd::active_path() != simd::Path::SCALAR);
    return;
  }
#pragma omp parallel for collapse(2)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < C; ++c) {
      const float* plane = xp + (b * C + c) * H * W;  // (H, W)
      const int64_t out_base = (b * C + c) * Ho * Wo;
      for (int64_t oh = 0; oh < Ho; ++oh)
        for (int64_t ow = 0; ow < Wo; ++ow) {
          float best = -std::numeric_limits<float>::infinity();
          int64_t best_index = -1;
          for (int64_t kh = 0; kh < K; ++kh) {
            const int64_t h = oh * S - P + kh;
            if (h < 0 || h >= H) continue;
            for (int64_t kw = 0; kw < K; ++kw) {
              const int64_t w = ow * S - P + kw;
              if (w < 0 || w >= W) continue;
              const float v = plane[h * W + w];
              // NaN propagates (as in PyTorch): a NaN wins over any number.
              if (best_index < 0 || v > best || (v != v && best == best)) {
                best = v;
                best_index = h * W + w;
              }
            }
          }
          yp[out_base + oh * Wo + ow] = best;
          if (ap) ap[out_base + oh * Wo + ow] = int32_t(best_index);
        }
    }
}

void CpuOps::maxpool_backward(const Tensor& dy, const Tensor& argmax, const PoolGeometry& g, Tensor& dx) {
  const int64_t B = dy.dim(0), C = g.c, H = g.h, W = g.w, Ho = g.oh, Wo = g.ow;
  const float* dyp = dy.f32();
  const int32_t* ap = argmax.as<int32_t>();
  float* dxp = dx.f32();
  // Each (b, c) plane is owned by one thread, which zeroes it (while it is in its cache) and adds
  // the window gradients in a fixed order (overlapping windows).
#pragma omp parallel for collapse(2)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < C; ++c) {
      const int64_t out_base = (b * C + c) * Ho * Wo;
      float* plane = dxp + (b * C + c) * H * W;
      std::memset(plane, 0, size_t(H * W) * sizeof(float));
      for (int64_t o = 0; o < Ho * Wo; ++o) plane[ap[out_base + o]] += dyp[out_base + o];
    }
}

// ---------------------------------------------------------------------------------------------
// GlobalAvgPool: images (B, C, N) or tokens (B, N, C) -> (B, C)

void CpuOps::avgpool_forward(const Tensor& x, int64_t C, int64_t N, bool tokens, Tensor& y) {
  const int64_t B = x.dim(0);
  const float* xp = x.f32();
  float* yp = y.f32();
  const float inv = 1.0f / float(N);
#pragma omp parallel for if (x.numel() > (1 << 16))
  for (int64_t b = 0; b < B; ++b) {
    const float* xb = xp + b * C * N;
    float* yb = yp + b * C;
    if (tokens) {  // xb: (T, C)
      for (int64_t c = 0; c < C; ++c) yb[c] = 0.0f;
      for (int64_t t = 0; t < N; ++t)
        for (int64_t c = 0; c < C; ++c) yb[c] += xb[t * C + c];
      for (int64_t c = 0; c < C; ++c) yb[c] *= inv;
    } else {  // xb: (C, H * W)
      for (int64_t c = 0; c < C; ++c) {
        float s = 0.0f;
        for (int64_t i = 0; i < N; ++i) s += xb[c * N + i];
        yb[c] = s * inv;
      }
    }
  }
}

void CpuOps::avgpool_backward(const Tensor& dy, int64_t C, int64_t N, bool tokens, Tensor& dx) {
  const int64_t B = dy.dim(0);
  const float* dyp = dy.f32();
  float* dxp = dx.f32();
  const float inv = 1.0f / float(N);
#pragma omp parallel for if (dx.numel() > (1 << 16))
  for (int64_t b = 0; b < B; ++b) {
    const float* dyb = dyp + b * C;
    float* dxb = dxp + b * C * N;
    if (tokens) {
      for (int64_t t = 0; t < N; ++t)
        for (int64_t c = 0; c < C; ++c) dxb[t * C + c] = dyb[c] * inv;
    } else {
      for (int64_t c = 0; c < C; ++c)
        for (int64_t i = 0; i < N; ++i) dxb[c * N + i] = dyb[c] * inv;
    }
  }
}

}  // namespace qsync
