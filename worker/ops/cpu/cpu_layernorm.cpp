// File: worker/ops/cpu/cpu_layernorm.cpp
// CpuOps: layer norm (after llm.c's layernorm_forward/backward), forward beside backward, and
// their plain per-row loops (the _ref oracle). A row's mean, variance and gradient means are
// sums over its C channels in order; summed one row at a time, each add waits for the one
// before (about 3 cycles), so the kernels here sum LAYERNORM_ROW_GROUP rows side by side: the
// same adds in the same order for every row, independent of each other. A group of 8 rows reads
// 8x8 tiles and transposes them in registers (tile_transpose.h), so that one AVX2 lane follows
// one row: lane g adds row g's channels in their order. The results are bit for bit the _ref's
// (-ffp-contract=off fuses nothing, and the intrinsics multiply and add separately). The backward
// runs in chunks of COLUMN_SUM_CHUNK rows, the threads' unit: each chunk's input gradient and its
// partial gain and bias sums in one pass, the partials added in chunk order
// (kernels/column_sum_order.h).
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "worker/ops/cpu/cpu_kernels.h"
#include "worker/ops/cpu/tile_transpose.h"
#include "worker/ops/cpu_ops.h"

namespace qsync {

// ---------------------------------------------------------------------------------------------
// The plain loops

void layernorm_rows_ref(const float* x, const float* weight, const float* bias, int64_t rows, int64_t C, float* y,
                        float* xhat, float* rstd) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * C;
    float mean = 0.0f;
    for (int64_t c = 0; c < C; ++c) mean += xr[c];
    mean /= float(C);
    float var = 0.0f;
    for (int64_t c = 0; c < C; ++c) {
      const float d = xr[c] - mean;
      var += d * d;
    }
    var /= float(C);
    const float s = 1.0f / std::sqrt(var + LAYERNORM_EPS);
    for (int64_t c = 0; c < C; ++c) {
      const float n = (xr[c] - mean) * s;
      y[r * C + c] = n * weight[c] + bias[c];
      if (xhat) xhat[r * C + c] = n;
    }
    if (rstd) rstd[r] = s;
  }
}

// dx = rstd * (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat)), dnorm = w * dy;
// dweight += sum over rows of dy * xhat, dbias += sum over rows of dy: per chunk of
// COLUMN_SUM_CHUNK rows (rows in order), then the chunks in order (kernels/column_sum_order.h)
void layernorm_backward_ref(const float* dy, const float* xhat, const float* rstd, const float* w, int64_t rows,
                            int64_t C, float* dx, float* dw, float* db) {
  for (int64_t r = 0; r < rows; ++r) {
    float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
    for (int64_t c = 0; c < C; ++c) {
      const float dnorm = w[c] * dy[r * C + c];
      dnorm_mean += dnorm;
      dnorm_norm_mean += dnorm * xhat[r * C + c];
    }
    dnorm_mean /= float(C);
    dnorm_norm_mean /= float(C);
    for (int64_t c = 0; c < C; ++c)
      dx[r * C + c] = rstd[r] * (w[c] * dy[r * C + c] - dnorm_mean - xhat[r * C + c] * dnorm_norm_mean);
  }
  const int64_t chunks = (rows + COLUMN_SUM_CHUNK - 1) / COLUMN_SUM_CHUNK;
  for (int64_t c = 0; c < C; ++c)
    for (int64_t k = 0; k < chunks; ++k) {
      float pw = 0.0f, pb = 0.0f;
      for (int64_t r = k * COLUMN_SUM_CHUNK; r < std::min(rows, (k + 1) * COLUMN_SUM_CHUNK); ++r) {
        pw += dy[r * C + c] * xhat[r * C + c];
        pb += dy[r * C + c];
      }
      dw[c] += pw;
      db[c] += pb;
    }
}

// ---------------------------------------------------------------------------------------------
// Forward: G rows side by side

namespace {

constexpr int64_t LAYERNORM_ROW_GROUP = 8;

// The sums of one group of 8 rows (x: (8, C) from the group's first row): mean[g] = sum_c x / C
// and var[g] = sum_c (x - mean)^2 / C, each row's channels in order (the _ref's adds).
__attribute__((target("avx2"))) void layernorm_moments8(const float* x, int64_t C, float mean[8], float var[8]) {
  __m256 t[8];
  __m256 m = _mm256_setzero_ps();
  int64_t c = 0;
  for (; c + 8 <= C; c += 8) {
    load_tile_transposed(x + c, C, t);
    for (int j = 0; j < 8; ++j) m = _mm256_add_ps(m, t[j]);
  }
  _mm256_storeu_ps(mean, m);
  for (int64_t cc = c; cc < C; ++cc)
    for (int g = 0; g < 8; ++g) mean[g] += x[g * C + cc];
  for (int g = 0; g < 8; ++g) mean[g] /= float(C);
  m = _mm256_loadu_ps(mean);
  __m256 v = _mm256_setzero_ps();
  for (c = 0; c + 8 <= C; c += 8) {
    load_tile_transposed(x + c, C, t);
    for (int j = 0; j < 8; ++j) {
      const __m256 d = _mm256_sub_ps(t[j], m);
      v = _mm256_add_ps(v, _mm256_mul_ps(d, d));
    }
  }
  _mm256_storeu_ps(var, v);
  for (int64_t cc = c; cc < C; ++cc)
    for (int g = 0; g < 8; ++g) {
      const float d = x[g * C + cc] - mean[g];
      var[g] += d * d;
    }
}

template <int64_t G>
void layernorm_group(const float* x, const float* weight, const float* bias, int64_t C, float* y, float* xhat,
                     float* rstd) {  // x, y, xhat: (G, C) from the group's first row; rstd (G)
  float mean[G] = {}, var[G] = {}, s[G];
  if constexpr (G == 8) {
    layernorm_moments8(x, C, mean, var);
  } else {
    for (int64_t c = 0; c < C; ++c)
      for (int64_t g = 0; g < G; ++g) mean[g] += x[g * C + c];
    for (int64_t g = 0; g < G; ++g) mean[g] /= float(C);
    for (int64_t c = 0; c < C; ++c)
      for (int64_t g = 0; g < G; ++g) {
        const float d = x[g * C + c] - mean[g];
        var[g] += d * d;
      }
  }
  for (int64_t g = 0; g < G; ++g) s[g] = 1.0f / std::sqrt(var[g] / float(C) + LAYERNORM_EPS);
  for (int64_t g = 0; g < G; ++g) {
    const float* xr = x + g * C;
    float* yr = y + g * C;
    for (int64_t c = 0; c < C; ++c) {
      const float n = (xr[c] - mean[g]) * s[g];
      yr[c] = n * weight[c] + bias[c];
      if (xhat) xhat[g * C + c] = n;
    }
    if (rstd) rstd[g] = s[g];
  }
}

}  // namespace

void layernorm_rows(const float* x, const float* weight, const float* bias, int64_t rows, int64_t C, float* y,
                    float* xhat, float* rstd) {
  constexpr int64_t G = LAYERNORM_ROW_GROUP;
  const int64_t groups = rows / G;
#pragma omp parallel for if (rows * C > (1 << 14))
  for (int64_t i = 0; i < groups; ++i)
    layernorm_group<G>(x + i * G * C, weight, bias, C, y + i * G * C, xhat ? xhat + i * G * C : nullptr,
                       rstd ? rstd + i * G : nullptr);
  for (int64_t r = groups * G; r < rows; ++r)
    layernorm_group<1>(x + r * C, weight, bias, C, y + r * C, xhat ? xhat + r * C : nullptr, rstd ? rstd + r : nullptr);
}

void CpuOps::layernorm_forward(const Tensor& x, const Tensor& w, const Tensor& b, float eps, Tensor& y, Tensor* xhat,
                               Tensor* rstd) {
  if (eps != LAYERNORM_EPS)
    throw std::logic_error("layernorm_forward: the engine's layer norm uses eps " + std::to_string(LAYERNORM_EPS) +
                           ", got " + std::to_string(eps));
  const int64_t C = w.numel(), R = x.numel() / C;
  layernorm_rows(x.f32(), w.f32(), b.f32(), R, C, y.f32(), xhat ? xhat->f32() : nullptr, rstd ? rstd->f32() : nullptr);
}

// ---------------------------------------------------------------------------------------------
// Backward: dx G rows side by side; dweight and dbias by blocks of channels

namespace {

// A group of 8 rows' gradient sums: dm[g] = sum_c w[c] dy[g, c] and dmn[g] = sum_c w[c] dy[g, c]
// xhat[g, c], each row's channels in order.
__attribute__((target("avx2"))) void layernorm_dnorm_sums8(const float* dy, const float* xhat, const float* w,
                                                           int64_t C, float dm[8], float dmn[8]) {
  __m256 td[8], tx[8];
  __m256 a = _mm256_setzero_ps(), b = _mm256_setzero_ps();
  int64_t c = 0;
  for (; c + 8 <= C; c += 8) {
    load_tile_transposed(dy + c, C, td);
    load_tile_transposed(xhat + c, C, tx);
    for (int j = 0; j < 8; ++j) {
      const __m256 dnorm = _mm256_mul_ps(_mm256_set1_ps(w[c + j]), td[j]);
      a = _mm256_add_ps(a, dnorm);
      b = _mm256_add_ps(b, _mm256_mul_ps(dnorm, tx[j]));
    }
  }
  _mm256_storeu_ps(dm, a);
  _mm256_storeu_ps(dmn, b);
  for (; c < C; ++c)
    for (int g = 0; g < 8; ++g) {
      const float dnorm = w[c] * dy[g * C + c];
      dm[g] += dnorm;
      dmn[g] += dnorm * xhat[g * C + c];
    }
}

template <int64_t G>
void layernorm_dx_group(const float* dy, const float* xhat, const float* rstd, const float* w, int64_t C,
                        float* dx) {  // dy, xhat, dx: (G, C) from the group's first row; rstd (G)
  float dnorm_mean[G] = {}, dnorm_norm_mean[G] = {};
  if constexpr (G == 8) {
    layernorm_dnorm_sums8(dy, xhat, w, C, dnorm_mean, dnorm_norm_mean);
  } else {
    for (int64_t c = 0; c < C; ++c)
      for (int64_t g = 0; g < G; ++g) {
        const float dnorm = w[c] * dy[g * C + c];
        dnorm_mean[g] += dnorm;
        dnorm_norm_mean[g] += dnorm * xhat[g * C + c];
      }
  }
  for (int64_t g = 0; g < G; ++g) {
    const float m = dnorm_mean[g] / float(C), mn = dnorm_norm_mean[g] / float(C);
    for (int64_t c = 0; c < C; ++c) dx[g * C + c] = rstd[g] * (w[c] * dy[g * C + c] - m - xhat[g * C + c] * mn);
  }
}

// Rows [r0, r1): dx (groups of LAYERNORM_ROW_GROUP rows, then single rows), and the chunk's
// partial sums pw (C) of dy * xhat and pb (C) of dy from +0, rows in order, while the rows are in
// cache. A chunk is a thread's unit: its rows are the ones the op before wrote on that core.
void layernorm_backward_chunk(const float* dy, const float* xhat, const float* rstd, const float* w, int64_t r0,
                              int64_t r1, int64_t C, float* dx, float* __restrict pw, float* __restrict pb) {
  constexpr int64_t G = LAYERNORM_ROW_GROUP;
  int64_t r = r0;
  for (; r + G <= r1; r += G) layernorm_dx_group<G>(dy + r * C, xhat + r * C, rstd + r, w, C, dx + r * C);
  for (; r < r1; ++r) layernorm_dx_group<1>(dy + r * C, xhat + r * C, rstd + r, w, C, dx + r * C);
  for (int64_t c = 0; c < C; ++c) pw[c] = pb[c] = 0.0f;
  for (r = r0; r < r1; ++r)
    for (int64_t c = 0; c < C; ++c) {
      pw[c] += dy[r * C + c] * xhat[r * C + c];
      pb[c] += dy[r * C + c];
    }
}

}  // namespace

void CpuOps::layernorm_backward(const Tensor& dy_t, const Tensor& xhat_t, const Tensor& rstd_t, const Tensor& w_t,
                                Tensor& dx_t, Tensor& dw_t, Tensor& db_t) {
  const int64_t C = w_t.numel(), R = dy_t.numel() / C;
  const float* dy = dy_t.f32();
  const float* xhat = xhat_t.f32();
  const float* rstd = rstd_t.f32();
  const float* w = w_t.f32();
  float* dx = dx_t.f32();
  const int64_t chunks = (R + COLUMN_SUM_CHUNK - 1) / COLUMN_SUM_CHUNK;
  thread_local std::vector<float> partials;  // (2, chunks, C); kept: no allocation in the steady state
  if (partials.size() < size_t(2 * chunks * C)) partials.resize(size_t(2 * chunks * C));
  float* pw = partials.data();
  float* pb = pw + chunks * C;
#pragma omp parallel for schedule(static) if (dy_t.numel() > (1 << 14))
  for (int64_t k = 0; k < chunks; ++k) {
    const int64_t r0 = k * COLUMN_SUM_CHUNK, r1 = std::min(R, r0 + COLUMN_SUM_CHUNK);
    layernorm_backward_chunk(dy, xhat, rstd, w, r0, r1, C, dx, pw + k * C, pb + k * C);
  }
  float* dw = dw_t.f32();
  float* db = db_t.f32();
  for (int64_t k = 0; k < chunks; ++k)  // the chunks' partials in order
    for (int64_t c = 0; c < C; ++c) {
      dw[c] += pw[k * C + c];
      db[c] += pb[k * C + c];
    }
}

}  // namespace qsync
