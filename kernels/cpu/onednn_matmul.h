// File: kernels/cpu/onednn_matmul.h
// oneDNN matmul primitives of the cpu GEMM backend (gemm_onednn.cpp): one primitive per distinct
// configuration (types, sizes, layouts, epilogue, threads), cached for the process, and one call
// of it on the caller's operands with this thread's scratchpad.
#pragma once

#include <cstdint>
#include <string>
#include <tuple>

#include <dnnl.hpp>

namespace qsync::onednn_matmul {

using dt = dnnl::memory::data_type;

// Whether an implementation is oneDNN's slow reference kernel, or none at all.
bool is_ref_impl(const std::string& impl);

// One matmul configuration: the key of the primitive cache.
struct MatmulKey {
  dt a_type, b_type;
  int64_t m, n, k;
  bool ta, tb;
  int64_t lda, ldb, ldc;
  int scale_mask;  // -1: no output scales, 0: one scale, 2: per column of C
  float beta;
  bool a_zero_point = false;  // u8 A with a runtime source zero point (see Int8Input)
  bool bias = false;          // an FP32 (1, n) bias in the epilogue (only without scales and beta)
  bool one_thread = false;    // built and run with one OpenMP thread (a slice of the *_slices.h splits)
  dt c_type = dt::f32;        // s32: a K slice's exact sums (see k_sliced)
  auto tie() const {
    return std::tie(a_type, b_type, m, n, k, ta, tb, lda, ldb, ldc, scale_mask, beta, a_zero_point, bias, one_thread,
                    c_type);
  }
  bool operator<(const MatmulKey& o) const { return tie() < o.tie(); }
};

struct Matmul {
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul prim;
  std::string impl;
};

// The primitive of `key`, built on first use (impl empty when oneDNN rejects the key).
const Matmul& matmul_cached(const MatmulKey& key);

// What one matmul call reads and writes (pointers as handed to oneDNN).
struct MatmulOperands {
  const void* a;
  const void* b;
  int b_elem;  // bytes per element of b
  void* c;     // FP32 or, for a K slice, int32
  const float* bias;    // (n) or nullptr
  const float* scales;  // output scales: one, or one per column of C
  const char* a_precision;
};

// Runs the cached primitive of `key` on columns [j0, j0 + key.n) of C (of B, the scales and the
// bias likewise); key.n is the slice's width, the strides are the whole matrices'. Throws
// GemmError when oneDNN has no matmul for the key.
void run_matmul(const MatmulKey& key, const MatmulOperands& o, int64_t j0);

}  // namespace qsync::onednn_matmul
