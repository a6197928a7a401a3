// File: kernels/cuda/norm_cuda.h
// CUDA layer norm over the last dimension C (the CUDA side of worker/ops/cpu/cpu_layers.cpp):
// one warp per row; the gain and bias gradients sum the rows in kernels/column_sum_order.h's
// order, as the CPU's (dw adds dy * xhat rounded, as the CPU's unfused multiply). A plain C++
// header: `stream` is a cudaStream_t as void*; device pointers; enqueue only.
#pragma once

#include <cstdint>

#include "kernels/cuda/elementwise_cuda.h"

namespace qsync {

// y (rows, C) = (x - mean) * rstd * w + b; xhat (rows, C) and rstd (rows) written when not null.
void layernorm_forward_cuda(const float* x, const float* w, const float* b, int64_t rows, int64_t C, float eps,
                            float* y, float* xhat, float* rstd, void* stream);

inline int64_t layernorm_backward_scratch_floats(int64_t rows, int64_t C) {
  return 2 * ((rows + COLUMN_SUM_CHUNK - 1) / COLUMN_SUM_CHUNK) * C;
}
// dx written; dw += sum_rows dy * xhat, db += sum_rows dy. `scratch` holds
// layernorm_backward_scratch_floats(rows, C) floats.
void layernorm_backward_cuda(const float* dy, const float* xhat, const float* rstd, const float* w, int64_t rows,
                             int64_t C, float* dx, float* dw, float* db, float* scratch, void* stream);

}  // namespace qsync
