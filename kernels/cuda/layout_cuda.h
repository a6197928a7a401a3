// File: kernels/cuda/layout_cuda.h
// CUDA kernels that only move data: 2-D transposes (batched) of 1-, 2- and 4-byte elements
// through shared-memory tiles, and strided 2-D copies with zero padding (the GEMM staging of
// INT8/FP8 operands whose shapes or layouts cuBLASLt does not take). A plain C++ header:
// `stream` is a cudaStream_t as void*; pointers are device pointers; calls only enqueue work.
#pragma once

#include <cstdint>

namespace qsync {

// dst (cols, rows) = src (rows, cols) for each of `batch` matrices stored back to back.
void transpose_cuda(const void* src, void* dst, int64_t batch, int64_t rows, int64_t cols, int elem, void* stream);

// dst (dst_rows, dst_cols) with row stride ld_dst = src (rows, cols) with row stride ld_src in
// its top-left corner, zeros elsewhere (dst_rows >= rows, dst_cols >= cols).
void copy_2d_padded_cuda(const void* src, int64_t rows, int64_t cols, int64_t ld_src, void* dst, int64_t dst_rows,
                         int64_t dst_cols, int64_t ld_dst, int elem, void* stream);

}  // namespace qsync
