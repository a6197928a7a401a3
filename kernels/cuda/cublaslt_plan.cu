// File: kernels/cuda/cublaslt_plan.cu
// cuBLASLt descriptors, heuristics and scratch (see cublaslt_plan.h).
#include "kernels/cuda/cublaslt_plan.h"

#include <stdexcept>
#include <string>

#include "kernels/cuda/cublaslt_matmul.h"
#include "kernels/cuda/cuda_device.h"

namespace qsync {
namespace {

const char* lt_status_name(cublasStatus_t st) {
  switch (st) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "unknown cublasStatus_t";
}

template <typename T>
void set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const T& value) {
  QSYNC_LT_CHECK(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)));
}
template <typename T>
void set_pref(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, const T& value) {
  QSYNC_LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof(value)));
}

LtOwned<cublasLtMatrixLayout_t> make_layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld, int64_t batch,
                                            int64_t stride) {
  cublasLtMatrixLayout_t layout = nullptr;
  QSYNC_LT_CHECK(cublasLtMatrixLayoutCreate(&layout, type, uint64_t(rows), uint64_t(cols), ld));
  LtOwned<cublasLtMatrixLayout_t> owned(layout);
  if (batch > 1) {
    const int32_t count = int32_t(batch);
    QSYNC_LT_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
    QSYNC_LT_CHECK(
        cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
  }
  return owned;
}

const char* type_name(cudaDataType_t t) {
  switch (t) {
    case CUDA_R_32F: return "fp32";
    case CUDA_R_16F: return "fp16";
    case CUDA_R_16BF: return "bf16";
    case CUDA_R_8I: return "int8";
    case CUDA_R_32I: return "int32";
    case CUDA_R_8F_E4M3: return "fp8-e4m3";
    case CUDA_R_8F_E5M2: return "fp8-e5m2";
    default: return "other";
  }
}

}  // namespace

void lt_check(cublasStatus_t st, const char* what, const char* file, int line) {
  if (st == CUBLAS_STATUS_SUCCESS) return;
  throw std::runtime_error(std::string(file) + ":" + std::to_string(line) + ": " + what + " failed: " +
                           lt_status_name(st) + " (" + std::to_string(int(st)) + ")");
}

cudaDataType_t lt_data_type(Precision p) {
  switch (p) {
    case Precision::FP32:
    case Precision::TF32: return CUDA_R_32F;
    case Precision::FP16: return CUDA_R_16F;
    case Precision::BF16: return CUDA_R_16BF;
    case Precision::INT8: return CUDA_R_8I;
    case Precision::FP8_E4M3: return CUDA_R_8F_E4M3;
    case Precision::FP8_E5M2: return CUDA_R_8F_E5M2;
  }
  return CUDA_R_32F;
}

uint32_t lt_pointer_alignment(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  uint32_t alignment = 256;
  while (alignment > 1 && address % alignment != 0) alignment >>= 1;
  return alignment;
}

void lt_plan_key_alignments(LtPlanKey& key, const LtPlanPointers& p) {
  key.align_a = lt_pointer_alignment(p.a);
  key.align_b = lt_pointer_alignment(p.b);
  key.align_d = lt_pointer_alignment(p.d);
  key.align_bias = p.bias != nullptr ? lt_pointer_alignment(p.bias) : 256;
}

std::unique_ptr<LtPlan> lt_plan_create(cublasLtHandle_t handle, const LtPlanKey& key, const LtPlanPointers& p) {
  auto plan = std::make_unique<LtPlan>();
  cublasLtMatmulDesc_t raw = nullptr;
  QSYNC_LT_CHECK(cublasLtMatmulDescCreate(&raw, key.compute, key.scale_type));
  plan->desc.reset(raw);
  set_desc(raw, CUBLASLT_MATMUL_DESC_TRANSA, int32_t(key.transa));
  set_desc(raw, CUBLASLT_MATMUL_DESC_TRANSB, int32_t(key.transb));
  if (key.epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
    set_desc(raw, CUBLASLT_MATMUL_DESC_EPILOGUE, key.epilogue);
    set_desc(raw, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, int32_t(CUDA_R_32F));
  }
  if (key.fast_accum) set_desc(raw, CUBLASLT_MATMUL_DESC_FAST_ACCUM, int8_t(1));
  lt_plan_set_pointers(*plan, p);
  // Stored shapes: op(A) is (m, k), op(B) is (k, n); D is (m, n).
  const bool ta = key.transa != CUBLAS_OP_N, tb = key.transb != CUBLAS_OP_N;
  plan->a_layout = make_layout(key.a_type, ta ? key.k : key.m, ta ? key.m : key.k, key.lda, key.batch, key.stride_a);
  plan->b_layout = make_layout(key.b_type, tb ? key.n : key.k, tb ? key.k : key.n, key.ldb, key.batch, key.stride_b);
  plan->d_layout = make_layout(key.d_type, key.m, key.n, key.ldd, key.batch, key.stride_d);

  cublasLtMatmulPreference_t raw_pref = nullptr;
  QSYNC_LT_CHECK(cublasLtMatmulPreferenceCreate(&raw_pref));
  LtOwned<cublasLtMatmulPreference_t> pref(raw_pref);
  set_pref(raw_pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, uint64_t(CUBLASLT_WORKSPACE_BYTES));
  // Split-k reductions in the output buffer add partial results in an unspecified order: leave
  // them out so that a GEMM's result does not change from run to run.
  set_pref(raw_pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
           uint32_t(CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE | CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE));
  set_pref(raw_pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_a);
  set_pref(raw_pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_b);
  set_pref(raw_pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_d);
  set_pref(raw_pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_d);

  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(handle, raw, plan->a_layout.get(), plan->b_layout.get(),
                                                           plan->d_layout.get(), plan->d_layout.get(), raw_pref, 1,
                                                           &result, &found);
  if (hs != CUBLAS_STATUS_NOT_SUPPORTED && hs != CUBLAS_STATUS_INVALID_VALUE) QSYNC_LT_CHECK(hs);
  plan->found = hs == CUBLAS_STATUS_SUCCESS && found > 0 && result.state == CUBLAS_STATUS_SUCCESS;
  if (plan->found) plan->algo = result.algo;
  return plan;
}

void lt_plan_set_pointers(const LtPlan& plan, const LtPlanPointers& p) {
  cublasLtMatmulDesc_t desc = plan.desc.get();
  if (p.bias != nullptr) set_desc(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, p.bias);
  if (p.a_scale != nullptr) set_desc(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(p.a_scale));
  if (p.b_scale != nullptr) set_desc(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(p.b_scale));
}

void lt_plan_no_algorithm(const LtPlanKey& key) {
  throw GemmError(std::string("gemm: cuda: cuBLASLt has no algorithm for ") + type_name(key.a_type) + " x " +
                  type_name(key.b_type) + " -> " + type_name(key.d_type) + " (cuBLASLt m=" + std::to_string(key.m) +
                  " n=" + std::to_string(key.n) + " k=" + std::to_string(key.k) + ", transa " +
                  (key.transa == CUBLAS_OP_N ? "N" : "T") + ", transb " + (key.transb == CUBLAS_OP_N ? "N" : "T") +
                  ", lda " + std::to_string(key.lda) + " ldb " + std::to_string(key.ldb) + " ldd " +
                  std::to_string(key.ldd) + ", alignments " + std::to_string(key.align_a) + "/" +
                  std::to_string(key.align_b) + "/" + std::to_string(key.align_d) +
                  " bytes); check the device's precision support (device_class_capabilities) and the alignment of "
                  "the data pointers");
}

void* LtScratch::get(size_t bytes, cudaStream_t stream) {
  if (bytes <= bytes_) return ptr_;
  release(stream);
  const size_t rounded = (bytes + (size_t(1) << 20) - 1) / (size_t(1) << 20) * (size_t(1) << 20);  // whole MiB
  QSYNC_CUDA_CHECK(cudaMallocAsync(&ptr_, rounded, stream));
  bytes_ = rounded;
  return ptr_;
}

void LtScratch::release(cudaStream_t stream) {
  if (ptr_ != nullptr) (void)cudaFreeAsync(ptr_, stream);
  ptr_ = nullptr;
  bytes_ = 0;
}

}  // namespace qsync
