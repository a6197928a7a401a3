// File: kernels/column_sum_order.h
// The one order in which every backend sums a matrix's columns over its rows: a linear layer's
// bias gradient (db += sum over rows of dy), the row sums of a transposed GEMM operand, and layer
// norm's gain and bias gradients. A partial sum per chunk of COLUMN_SUM_CHUNK consecutive rows
// (from +0, the chunk's rows in order; the last chunk may be short), then the partials added to
// the sum in chunk order. The bias sums skip the partials when the rows fit one chunk (the rows
// added to the sum itself, in order); layer norm's always take them. The order depends on the
// shape alone: the same bits at any thread count, and the CPU and CUDA follow it alike
// (worker/ops/cpu/cpu_elementwise.cpp and cpu_layernorm.cpp, kernels/cuda/elementwise_cuda.cu
// and norm_cuda.cu): the bias sums are bitwise equal; layer norm's inputs (xhat) differ in their
// last bits between the two forwards. On the CPU the chunks are also the threads' work: a
// thread sums the rows it wrote in the op before, not another core's.
#pragma once

#include <cstdint>

namespace qsync {

inline constexpr int64_t COLUMN_SUM_CHUNK = 128;

// The number of chunk partials of a bias sum over `rows` rows: 0 when the rows fit one chunk
// (summed in place).
inline int64_t column_sum_chunks(int64_t rows) {
  return rows <= COLUMN_SUM_CHUNK ? 0 : (rows + COLUMN_SUM_CHUNK - 1) / COLUMN_SUM_CHUNK;
}

}  // namespace qsync
