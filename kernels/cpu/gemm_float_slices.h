// File: kernels/cpu/gemm_float_slices.h
// FP32 and BF16 products of the cpu GEMM backend split over the threads as slices of C's rows or
// columns, one single-threaded oneDNN call per thread (gemm_int8_slices.h splits INT8's). Which
// split a product takes depends on its shape, types and the thread count alone.
#pragma once

#include "kernels/cpu/onednn_matmul.h"

namespace qsync::onednn_matmul {

struct OutputSlices {
  int count = 1;      // 1: whole, on oneDNN's threads
  bool rows = false;  // slices of C's rows (of op(A) likewise), else of its columns (of op(B))
};

// How `key` runs on `threads` threads.
OutputSlices float_output_slices(const MatmulKey& key, int threads);

// Runs `key` as `s`, each slice on its own thread with oneDNN alone.
void run_output_slices(const MatmulKey& key, const MatmulOperands& o, const OutputSlices& s);

}  // namespace qsync::onednn_matmul
