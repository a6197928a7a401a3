// File: kernels/cpu/gemm_float_slices.h
// FP32 and BF16 products of the cpu GEMM backend split over the threads, one single-threaded
// oneDNN call per thread (gemm_int8_slices.h splits INT8's): as slices of C's rows or columns, or
// of the depth K (each slice's sums in FP32, added after). Which split a product takes depends
// on its shape, types and the thread count alone.
#pragma once

#include "kernels/cpu/onednn_matmul.h"

namespace qsync::onednn_matmul {

struct FloatSlices {
  enum class Side { ROWS, COLUMNS, DEPTH };
  int count = 1;           // 1: whole, on oneDNN's threads
  Side side = Side::ROWS;  // slices of C's rows (of op(A) likewise), its columns (of op(B)), or of K
};

// How `key` runs on `threads` threads.
FloatSlices float_slices(const MatmulKey& key, int threads);

// Runs `key` as `s`, each slice on its own thread with oneDNN alone.
void run_float_slices(const MatmulKey& key, const MatmulOperands& o, const FloatSlices& s);

}  // namespace qsync::onednn_matmul
