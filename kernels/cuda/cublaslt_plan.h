// File: kernels/cuda/cublaslt_plan.h
// The pieces of kernels/cuda/cublaslt_matmul.cu that touch cuBLASLt's descriptors: one cached
// plan (matmul descriptor, layouts, the heuristic's algorithm) per key, the pointer attributes
// set per call, status checks that name the call, and stream-ordered scratch buffers.
// Internal to kernels/cuda/ (includes cublasLt.h).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <tuple>
#include <type_traits>

#include "kernels/gemm.h"

namespace qsync {

// Throws std::runtime_error("<file>:<line>: <call> failed: CUBLAS_STATUS_... (n)").
void lt_check(cublasStatus_t st, const char* what, const char* file, int line);
#define QSYNC_LT_CHECK(call) ::qsync::lt_check((call), #call, __FILE__, __LINE__)

cudaDataType_t lt_data_type(Precision p);
// Largest power of two (at most 256) dividing the address.
uint32_t lt_pointer_alignment(const void* p);

// Everything cuBLASLt's heuristic depends on, in its own (column-major) terms.
struct LtPlanKey {
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  cudaDataType_t scale_type = CUDA_R_32F, a_type = CUDA_R_32F, b_type = CUDA_R_32F, d_type = CUDA_R_32F;
  cublasOperation_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
  int64_t m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldd = 0;
  int64_t batch = 1, stride_a = 0, stride_b = 0, stride_d = 0;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  bool fast_accum = false, scale_pointers = false;
  uint32_t align_a = 256, align_b = 256, align_d = 256, align_bias = 256;
  auto tie() const {
    return std::tie(compute, scale_type, a_type, b_type, d_type, transa, transb, m, n, k, lda, ldb, ldd, batch,
                    stride_a, stride_b, stride_d, epilogue, fast_accum, scale_pointers, align_a, align_b, align_d,
                    align_bias);
  }
  bool operator<(const LtPlanKey& o) const { return tie() < o.tie(); }
};

// The pointers of one call (cuBLASLt's A, B, D; bias or bias-gradient output; FP8 scales).
struct LtPlanPointers {
  const void* a;
  const void* b;
  void* d;
  const void* bias;
  const float* a_scale;
  const float* b_scale;
};
// Sets key.align_* from the pointers.
void lt_plan_key_alignments(LtPlanKey& key, const LtPlanPointers& p);

struct LtDestroy {
  void operator()(cublasLtMatmulDesc_t p) const { (void)cublasLtMatmulDescDestroy(p); }
  void operator()(cublasLtMatrixLayout_t p) const { (void)cublasLtMatrixLayoutDestroy(p); }
  void operator()(cublasLtMatmulPreference_t p) const { (void)cublasLtMatmulPreferenceDestroy(p); }
};
template <typename Handle>
using LtOwned = std::unique_ptr<std::remove_pointer_t<Handle>, LtDestroy>;

struct LtPlan {
  LtOwned<cublasLtMatmulDesc_t> desc;
  LtOwned<cublasLtMatrixLayout_t> a_layout, b_layout, d_layout;
  cublasLtMatmulAlgo_t algo{};
  bool found = false;  // the heuristic returned an algorithm
};

// Builds the descriptors and asks the heuristic for one algorithm (workspace up to
// CUBLASLT_WORKSPACE_BYTES, no in-place reductions: deterministic results).
std::unique_ptr<LtPlan> lt_plan_create(cublasLtHandle_t handle, const LtPlanKey& key, const LtPlanPointers& p);
// The per-call pointer attributes (bias, FP8 scales) on the plan's descriptor.
void lt_plan_set_pointers(const LtPlan& plan, const LtPlanPointers& p);
// Throws GemmError: "cuBLASLt has no algorithm for ..." with the key's shape and types.
[[noreturn]] void lt_plan_no_algorithm(const LtPlanKey& key);

// A device buffer grown stream-ordered (cudaMallocAsync / cudaFreeAsync on the stream), so
// reuse across the calls on one stream is ordered like the kernels that use it.
class LtScratch {
 public:
  void* get(size_t bytes, cudaStream_t stream);
  void release(cudaStream_t stream);

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace qsync
