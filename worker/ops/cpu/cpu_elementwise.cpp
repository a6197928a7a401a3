// File: worker/ops/cpu/cpu_elementwise.cpp
// CpuOps: ReLU, exact-erf GELU, residual add, dropout, per-sample transposes, broadcast adds and
// the batch / row sums of positional tables and biases. Forward beside backward.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "worker/layers/layer_seed.h"
#include "worker/ops/cpu/cpu_kernels.h"
#include "worker/ops/cpu/vector_math.h"
#include "worker/ops/cpu_ops.h"

namespace qsync {
namespace {

int64_t batch_of(const Tensor& t) { return t.rank() == 0 ? 1 : t.dim(0); }

// GELU runs in chunks (the unit of its threads) through the vector erf/exp of vector_math.h.
constexpr int64_t GELU_CHUNK = 1024;

}  // namespace

// ---------------------------------------------------------------------------------------------
// ReLU: y = max(x, 0), mask = x > 0

void CpuOps::relu_forward(const Tensor& x, Tensor& y, Tensor* mask) {
  const int64_t n = x.numel(), B = batch_of(x);  // x (B, N...)
  const float* xp = x.f32();
  float* yp = y.f32();
  uint8_t* mp = mask != nullptr ? mask->as<uint8_t>() : nullptr;
  const int64_t per_sample = B > 0 ? n / B : 0;
#pragma omp parallel for if (n > (1 << 16))
  for (int64_t b = 0; b < B; ++b) {
    const float* xb = xp + b * per_sample;
    float* yb = yp + b * per_sample;
    for (int64_t i = 0; i < per_sample; ++i) yb[i] = xb[i] > 0.0f ? xb[i] : 0.0f;
    if (mp) {
      uint8_t* mb = mp + b * per_sample;
      for (int64_t i = 0; i < per_sample; ++i) mb[i] = xb[i] > 0.0f ? 1 : 0;
    }
  }
}

void CpuOps::relu_backward(const Tensor& dy, const Tensor& mask, Tensor& dx) {
  const int64_t B = batch_of(dy), per_sample = B > 0 ? dy.numel() / B : 0;
  const float* dyp = dy.f32();
  const uint8_t* mp = mask.as<uint8_t>();
  float* dxp = dx.f32();
#pragma omp parallel for if (dy.numel() > (1 << 16))
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = b * per_sample; i < (b + 1) * per_sample; ++i) dxp[i] = mp[i] ? dyp[i] : 0.0f;
}

// ---------------------------------------------------------------------------------------------
// GELU (exact): y = x * Phi(x), Phi(x) = 0.5 (1 + erf(x / sqrt 2));  dy/dx = Phi(x) + x * phi(x),
// phi(x) = exp(-x^2 / 2) / sqrt(2 pi). The forward writes the derivative (training); the backward
// multiplies it in.

void CpuOps::gelu_forward(const Tensor& x, Tensor& y, Tensor* dydx) {
  const int64_t n = x.numel();
  const float* xp = x.f32();
  float* yp = y.f32();
  float* dp = dydx != nullptr ? dydx->f32() : nullptr;
#pragma omp parallel for if (n > (1 << 14)) schedule(static)
  for (int64_t c = 0; c < (n + GELU_CHUNK - 1) / GELU_CHUNK; ++c) {
    const int64_t begin = c * GELU_CHUNK, len = std::min(GELU_CHUNK, n - begin);
    gelu_buffer(xp + begin, yp + begin, dp != nullptr ? dp + begin : nullptr, len);
  }
}

void CpuOps::gelu_backward(const Tensor& dydx, const Tensor& dy, Tensor& dx) {
  const int64_t n = dy.numel();
  const float* dp = dydx.f32();
  const float* dyp = dy.f32();
  float* dxp = dx.f32();
#pragma omp parallel for if (n > (1 << 16)) schedule(static)
  for (int64_t i = 0; i < n; ++i) dxp[i] = dyp[i] * dp[i];
}

// ---------------------------------------------------------------------------------------------
// Residual add: out = a + b

void CpuOps::add(const Tensor& a, const Tensor& b, Tensor& out) {
  const float* ap = a.f32();
  const float* bp = b.f32();
  float* op = out.f32();
  const int64_t n = a.numel();
#pragma omp parallel for if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) op[i] = ap[i] + bp[i];
}

// ---------------------------------------------------------------------------------------------
// Dropout (see worker/layers/dropout.h for the mask's definition)

void CpuOps::dropout_forward(const Tensor& x, double p, uint64_t key, Tensor& y, Tensor& mask) {
  const int64_t B = batch_of(x), per_sample = B > 0 ? x.numel() / B : 0;
  const float scale = p < 1.0 ? float(1.0 / (1.0 - p)) : 0.0f;
  const float* xp = x.f32();
  float* yp = y.f32();
  uint8_t* mp = mask.as<uint8_t>();
#pragma omp parallel for if (x.numel() > (1 << 14))
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = b * per_sample; i < (b + 1) * per_sample; ++i) {
      const uint8_t keep = hash_to_unit(counter_hash(key, uint64_t(i))) >= p ? 1 : 0;
      mp[i] = keep;
      yp[i] = keep ? xp[i] * scale : 0.0f;
    }
}

void CpuOps::dropout_backward(const Tensor& dy, const Tensor& mask, double p, Tensor& dx) {
  const float scale = p < 1.0 ? float(1.0 / (1.0 - p)) : 0.0f;
  const int64_t B = batch_of(dy), per_sample = B > 0 ? dy.numel() / B : 0;
  const float* dyp = dy.f32();
  const uint8_t* mp = mask.as<uint8_t>();
  float* dxp = dx.f32();
#pragma omp parallel for if (dy.numel() > (1 << 14))
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = b * per_sample; i < (b + 1) * per_sample; ++i) dxp[i] = mp[i] ? dyp[i] * scale : 0.0f;
}

// ---------------------------------------------------------------------------------------------
// Moves and sums

void CpuOps::transpose_batched(const Tensor& src, Tensor& dst, int64_t B, int64_t rows, int64_t cols) {
  const float* s0 = src.f32();
  float* d0 = dst.f32();
#pragma omp parallel for if (B * rows * cols > (1 << 16))
  for (int64_t b = 0; b < B; ++b) {
    const float* s = s0 + b * rows * cols;
    float* d = d0 + b * rows * cols;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) d[c * rows + r] = s[r * cols + c];
  }
}

void CpuOps::add_broadcast(const Tensor& x, const Tensor& table, Tensor& y) {
  const int64_t B = batch_of(x), TC = table.numel();
  const float* xp = x.f32();
  const float* wp = table.f32();
  float* yp = y.f32();
#pragma omp parallel for if (B * TC > (1 << 16))
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < TC; ++i) yp[b * TC + i] = xp[b * TC + i] + wp[i];
}

void CpuOps::sum_batch_into(const Tensor& dy, Tensor& table) {
  const int64_t B = batch_of(dy), TC = table.numel();
  const float* dyp = dy.f32();
  float* dw = table.f32();
  // Each element of the table sums the batch in order (the outer loop stays serial).
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < TC; ++i) dw[i] += dyp[b * TC + i];
}

namespace {

// out[j] = start[j] (or +0 where start is null) + a[0, j] + a[1, j] + ... for the columns j of
// a (rows, cols; rows lda apart), the rows in order; 16 columns at a time, their sums in registers.
void sum_columns(const float* a, int64_t rows, int64_t cols, int64_t lda, const float* start, float* out) {
  constexpr int64_t BLOCK = 16;  // one AVX-512 vector, two AVX2 ones
  for (int64_t j0 = 0; j0 < cols; j0 += BLOCK) {
    const int64_t width = std::min(BLOCK, cols - j0);
    float acc[BLOCK];
    for (int64_t j = 0; j < width; ++j) acc[j] = start != nullptr ? start[j0 + j] : 0.0f;
    if (width == BLOCK) {
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < BLOCK; ++j) acc[j] += a[i * lda + j0 + j];
    } else {
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < width; ++j) acc[j] += a[i * lda + j0 + j];
    }
    for (int64_t j = 0; j < width; ++j) out[j0 + j] = acc[j];
  }
}

}  // namespace

// The threads take chunks of rows, in order (schedule static): each sums the rows that the op
// before wrote on its core (row-parallel elementwise ops and GEMMs), where threads over blocks
// of columns read every row, half of them from the other core's cache (3x slower on this
// machine's two cores, and the next op's read of the buffer too).
void add_column_sums(const float* a, int64_t rows, int64_t cols, float* sums) {
  const int64_t chunks = column_sum_chunks(rows);
  if (chunks == 0) {  // rows in place; the threads over blocks of 64 columns
    constexpr int64_t COLUMNS = 64;
    const int64_t blocks = (cols + COLUMNS - 1) / COLUMNS;
#pragma omp parallel for schedule(static) if (rows * cols > (1 << 16) && blocks > 1)
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t j0 = b * COLUMNS;
      sum_columns(a + j0, rows, std::min(COLUMNS, cols - j0), cols, sums + j0, sums + j0);
    }
    return;
  }
  thread_local std::vector<float> partials;  // (chunks, cols); kept: no allocation in the steady state
  if (partials.size() < size_t(chunks * cols)) partials.resize(size_t(chunks * cols));
  float* p = partials.data();
#pragma omp parallel for schedule(static) if (rows * cols > (1 << 16))
  for (int64_t k = 0; k < chunks; ++k) {
    const int64_t r0 = k * COLUMN_SUM_CHUNK;
    sum_columns(a + r0 * cols, std::min(COLUMN_SUM_CHUNK, rows - r0), cols, cols, nullptr, p + k * cols);
  }
  for (int64_t k = 0; k < chunks; ++k)  // each column's partials in chunk order
    for (int64_t j = 0; j < cols; ++j) sums[j] += p[k * cols + j];
}

void add_column_sums_ref(const float* a, int64_t rows, int64_t cols, float* sums) {
  const int64_t chunks = column_sum_chunks(rows);
  for (int64_t j = 0; j < cols; ++j) {
    if (chunks == 0) {
      for (int64_t i = 0; i < rows; ++i) sums[j] += a[i * cols + j];
      continue;
    }
    for (int64_t k = 0; k < chunks; ++k) {
      float partial = 0.0f;
      const int64_t end = std::min(rows, (k + 1) * COLUMN_SUM_CHUNK);
      for (int64_t i = k * COLUMN_SUM_CHUNK; i < end; ++i) partial += a[i * cols + j];
      sums[j] += partial;
    }
  }
}

// db[j] += sum over rows i of dy[i, j]: add_column_sums.
void CpuOps::bias_grad_rows(const Tensor& dy, Tensor& db) {
  const int64_t N = db.numel(), M = N > 0 ? dy.numel() / N : 0;
  add_column_sums(dy.f32(), M, N, db.f32());
}

}  // namespace qsync
