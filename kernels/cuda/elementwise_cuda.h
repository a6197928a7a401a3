// File: kernels/cuda/elementwise_cuda.h
// CUDA kernels of the training engine's elementwise ops and simple reductions (the CUDA side of
// worker/ops/cpu/cpu_elementwise.cpp). A plain C++ header: `stream` is a cudaStream_t as void*;
// every pointer is a device pointer; calls only enqueue work. Shapes as (B, N).
//
// Bit-exactness with the CPU loops: ReLU, the residual add, dropout (same counter-based mask),
// the broadcast add, the batch sums (one thread per element, batch in order) and the bias row
// sums (kernels/column_sum_order.h) are bit-identical to the CPU. GELU uses CUDA's
// erff / expf, the CPU its own erfc polynomial and exp (worker/ops/cpu/gelu_math.cpp): both within
// a few 1e-7 of the exact values, not identical.
#pragma once

#include <cstdint>

#include "kernels/column_sum_order.h"

namespace qsync {

void relu_forward_cuda(const float* x, float* y, uint8_t* mask, int64_t n, void* stream);  // mask may be null
void relu_backward_cuda(const float* dy, const uint8_t* mask, float* dx, int64_t n, void* stream);
// y = x Phi(x); dydx (null outside training) = Phi(x) + x phi(x), the derivative the backward uses
void gelu_forward_cuda(const float* x, float* y, float* dydx, int64_t n, void* stream);
void gelu_backward_cuda(const float* dydx, const float* dy, float* dx, int64_t n, void* stream);  // dx = dy dydx
void add_cuda(const float* a, const float* b, float* out, int64_t n, void* stream);  // out = a + b
void accumulate_cuda(const float* x, float* y, int64_t n, void* stream);             // y += x
// Inverted dropout: keep i when hash_to_unit(counter_hash(key, i)) >= p (worker/layers/layer_seed.h);
// y = keep ? x * scale : 0.
void dropout_forward_cuda(const float* x, float* y, uint8_t* mask, int64_t n, double p, uint64_t key, float scale,
                          void* stream);
void dropout_backward_cuda(const float* dy, const uint8_t* mask, float* dx, int64_t n, float scale, void* stream);
// y (B, N) = x (B, N) + table (N)
void add_broadcast_cuda(const float* x, const float* table, float* y, int64_t batch, int64_t n, void* stream);
// table (N) += sum_b dy (B, N): one thread per element, b in order (the CPU's sums, bit for bit)
void sum_batch_into_cuda(const float* dy, float* table, int64_t batch, int64_t n, void* stream);
// db (N) += sum over rows of dy (M, N) in kernels/column_sum_order.h's order (the CPU's bits).
// `scratch` holds column_sum_scratch_floats(rows, n) floats.
inline int64_t column_sum_scratch_floats(int64_t rows, int64_t n) { return column_sum_chunks(rows) * n; }
void bias_grad_rows_cuda(const float* dy, float* db, int64_t rows, int64_t n, float* scratch, void* stream);
// y (M, N) += b (N) on every row
void bias_add_rows_cuda(float* y, const float* b, int64_t rows, int64_t n, void* stream);

// x[i] uniform in [-1, 1) from a counter-based hash of (seed, i): benchmark and test data.
void fill_uniform_cuda(float* x, int64_t n, uint64_t seed, void* stream);

}  // namespace qsync
