// File: kernels/cpu/gemm_int8_slices.h
// INT8 products of the cpu GEMM backend split over the threads, one single-threaded oneDNN call
// per thread: over slices of C's columns (few rows, many columns) or of K (a long K, in int32,
// added and scaled after). Which split a product takes depends on its shape alone, and both give
// the bits of one thread (exact int32 sums, per-entry epilogues).
#pragma once

#include "kernels/cpu/onednn_matmul.h"

namespace qsync::onednn_matmul {

// Whether a product runs as column slices, and into how many (1: whole, on oneDNN's threads).
bool column_sliced(const MatmulKey& key);
int column_slices(const MatmulKey& key);
// Runs `key` as `slices` column slices (of any types: FP32 and BF16 products take them too,
// gemm_float_slices.h).
void run_column_slices(const MatmulKey& key, const MatmulOperands& o, int slices);

// Whether a product runs as K slices (never one that column_sliced takes).
bool k_sliced(const MatmulKey& key);

// The scales and beta a K-sliced product applies after its sums.
struct SliceEpilogue {
  const float* scales;      // one, or one per column (scale_mask 0 or 2), or nullptr
  int scale_mask;
  const float* row_scales;  // (m) or nullptr
  float beta;
  float* c;
  int64_t ldc;
};

// Runs `key` (INT8, with its scales and beta in `e`, not in the key's epilogue) as K slices,
// one per thread, into C: out = sum * scale(j) (* row scale(i)) (+ beta * out).
void run_k_slices(const MatmulKey& key, const MatmulOperands& o, const SliceEpilogue& e);

}  // namespace qsync::onednn_matmul
