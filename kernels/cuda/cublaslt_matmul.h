// File: kernels/cuda/cublaslt_matmul.h
// The one cuBLASLt wrapper of the project: every GEMM on an NVIDIA GPU goes through it (the
// training ops of worker/ops/cuda/, the "cuda" backend of the GEMM registry, the benchmarks).
// Semantics are those of kernels/gemm.h (row-major, FP32 output, scales per tensor or per
// channel) with the pointers in device memory, plus what training wants from cuBLASLt:
//   * epilogues: bias added to every row of C (forward), and the row sums of op(A) accumulated
//     into a vector (a Linear's bias gradient from its dW GEMM: cuBLASLt's BGRADB), each with a
//     kernel fallback where the heuristic has no algorithm for the fused form;
//   * strided batches (attention's per-head products) for the floating-point precisions;
//   * INT8 (IMMA, s8 x s8 -> s32) and FP8 (E4M3 / E5M2, sm89+) in any layout and shape: cuBLASLt
//     takes only "TN" (both operands k-contiguous) with dimensions multiples of 16, so the
//     engine stages operands that are not (one transpose and/or zero-padding copy into scratch)
//     and dequantizes the accumulator with the scales (and bias, and beta) in one kernel;
//   * a cache of matmul descriptors, layouts and heuristic algorithms keyed by everything the
//     heuristic depends on (shape, types, transposes, leading dims, batch, epilogue, alignments):
//     a training step asks cuBLASLt's heuristic once per distinct GEMM, not once per call;
//   * deterministic results: reduction schemes that reduce in place (atomics) are excluded.
// Calls only enqueue on the engine's stream (no synchronization); scratch grows stream-ordered.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "kernels/gemm.h"

namespace qsync {

struct CudaMatmul {
  GemmDesc gemm;  // device pointers, the bias among them; ld 0 = packed
  float* row_sums_of_a = nullptr;  // (m) FP32 += sum_k op(A)[i, k]; floating-point A only
  // `batch` GEMMs, operand i at data + i * stride (elements); floating-point precisions only.
  int64_t batch = 1, stride_a = 0, stride_b = 0, stride_c = 0;
};

class CudaMatmulEngine {
 public:
  // On the calling thread's current device; `stream` is a cudaStream_t (nullptr: the legacy
  // default stream).
  explicit CudaMatmulEngine(void* stream);
  ~CudaMatmulEngine();
  CudaMatmulEngine(const CudaMatmulEngine&) = delete;
  CudaMatmulEngine& operator=(const CudaMatmulEngine&) = delete;

  // Enqueues the GEMM; throws GemmError naming the problem (types, a missing algorithm).
  void run(const CudaMatmul& mm);
  // Distinct GEMMs planned so far (cache entries), for tests and reports.
  size_t cached_plans() const;
  void* stream() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Bytes of cuBLASLt workspace per engine (Hopper's kernels use up to 32 MiB).
inline constexpr size_t CUBLASLT_WORKSPACE_BYTES = size_t(32) << 20;

// "cuBLASLt 130100" (cublasLtGetVersion).
std::string cublaslt_version_text();

}  // namespace qsync
