// File: kernels/cuda/attention_cuda.h
// The non-GEMM kernels of CUDA attention (the score products run as batched cuBLASLt GEMMs:
// worker/ops/cuda/cuda_attention.cpp): moving q, k, v between the (B, T, 3C) layout and one
// contiguous (T, hs) matrix per (batch, head), and the row softmax with its backward.
// A plain C++ header: `stream` is a cudaStream_t as void*; device pointers; enqueue only.
#pragma once

#include <cstdint>

namespace qsync {

// q, k, v (B * H, T, hs) = the heads of qkv (B, T, 3C), C = H * hs. Any of q, k, v may be null.
void attention_split_heads_cuda(const float* qkv, float* q, float* k, float* v, int64_t batch, int64_t tokens,
                                int64_t heads, int64_t head_size, void* stream);
// o (B * H, T, hs) = the heads of part `part` (column offset part * C) of rows of `row_width`
// floats: dout (B, T, C) with row_width C, part 0.
void attention_split_part_cuda(const float* src, float* o, int64_t batch, int64_t tokens, int64_t heads,
                               int64_t head_size, int64_t row_width, int part, void* stream);
// out (B, T, C) [at column offset `part` * C within rows of `row_width` floats] = o (B * H, T, hs).
// Merging into dqkv (B, T, 3C): row_width 3C, part 0 (q), 1 (k) or 2 (v); into out: C and 0.
void attention_merge_heads_cuda(const float* o, float* out, int64_t batch, int64_t tokens, int64_t heads,
                                int64_t head_size, int64_t row_width, int part, void* stream);
// In place over rows (B * H * T rows of T): s = softmax(s * scale) over the visible columns
// (causal: t2 <= t, where t is the row's index within its T rows), zeros beyond.
void attention_softmax_forward_cuda(float* scores, int64_t rows, int64_t tokens, float scale, bool causal, void* stream);
// In place: d = att * (d - sum(att * d)) * scale over the visible columns, zeros beyond.
void attention_softmax_backward_cuda(const float* att, float* d, int64_t rows, int64_t tokens, float scale, bool causal,
                                     void* stream);

}  // namespace qsync
