// File: kernels/cuda/softmax_xent_cuda.h
// CUDA fused softmax + cross-entropy (the CUDA side of the CPU's softmax_xent): one block per
// row computes the max (first maximum on ties), the sum of exponentials in double, the row's
// loss log(sum) - (x[target] - max) in double and the gradient in place of the logits' copy;
// a second kernel sums the rows' losses and hits in a fixed order (deterministic). A plain C++
// header: `stream` is a cudaStream_t as void*; device pointers; enqueue only.
#pragma once

#include <cstdint>

namespace qsync {

// dlogits (P, V) = (softmax(row) - onehot(target)) * scale, scale = grad_scale / loss_divisor;
// row_loss (P) double, row_correct (P) 0/1.
void softmax_xent_rows_cuda(const float* logits, const int32_t* targets, int64_t rows, int64_t V, float scale,
                            float* dlogits, double* row_loss, uint8_t* row_correct, void* stream);
// loss_sum[0] = sum of row_loss, correct[0] = sum of row_correct, in a fixed order.
void softmax_xent_sums_cuda(const double* row_loss, const uint8_t* row_correct, int64_t rows, double* loss_sum,
                            long long* correct, void* stream);

}  // namespace qsync
