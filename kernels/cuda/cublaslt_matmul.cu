// File: kernels/cuda/cublaslt_matmul.cu
// CudaMatmulEngine (see cublaslt_matmul.h).
//
// Row-major to column-major: our C (m, n) row-major with row stride ldc is, read column-major,
// C^T (n rows, m cols) with ld = ldc. cuBLASLt computes D = op(A) op(B) column-major, so we ask
// for C^T = opB^T opA^T: cuBLASLt's A is our b, its B is our a, its (m, n, k) is our (n, m, k).
//   our b.trans NO  : B stored (k, n) row-major = (n rows, k cols) col-major -> transa = N
//   our b.trans YES : B stored (n, k) row-major = (k rows, n cols) col-major -> transa = T
//   our a.trans NO  : A stored (m, k) row-major = (k rows, m cols) col-major -> transb = N
//   our a.trans YES : A stored (k, m) row-major = (m rows, k cols) col-major -> transb = T
// IMMA and FP8 kernels take only transa = T, transb = N: our a untransposed and b transposed,
// both k-contiguous (the forward X W^T). Their operands are staged into that layout (padded to
// multiples of 16) when they arrive otherwise; cuBLASLt's bias is per row of D = per column of C,
// and BGRADB reduces cuBLASLt's B (our a) over k = the row sums of op(A).
#include "kernels/cuda/cublaslt_matmul.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <tuple>

#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/cublaslt_plan.h"
#include "kernels/cuda/elementwise_cuda.h"
#include "kernels/cuda/layout_cuda.h"
#include "kernels/cuda/quantize_cuda.h"

namespace qsync {
namespace {

bool is_fp8(Precision p) { return p == Precision::FP8_E4M3 || p == Precision::FP8_E5M2; }
bool is_float(Precision p) {
  return p == Precision::FP32 || p == Precision::TF32 || p == Precision::BF16 || p == Precision::FP16;
}
int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

// Row sums of op(A) for the fallback of BGRADB: sums[i] += sum_k op(a)[i, k] (FP32 data).
__global__ void row_sums_kernel(const float* a, int64_t m, int64_t k, int64_t lda, bool a_trans, float* sums) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= m) return;
  float acc = sums[i];
  for (int64_t r = 0; r < k; ++r) acc = __fadd_rn(acc, a_trans ? a[r * lda + i] : a[i * lda + r]);
  sums[i] = acc;
}
// The bias epilogue's fallback: c[i, j] += bias[j] with row stride ldc.
__global__ void bias_rows_kernel(float* c, int64_t m, int64_t n, int64_t ldc, const float* bias) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < m * n; idx += stride)
    c[(idx / n) * ldc + idx % n] = __fadd_rn(c[(idx / n) * ldc + idx % n], bias[idx % n]);
}

}  // namespace

struct CudaMatmulEngine::Impl {
  cudaStream_t stream = nullptr;
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  std::mutex mu;
  std::map<LtPlanKey, std::unique_ptr<LtPlan>> plans;
  // Stream-ordered scratch of the INT8 / FP8 paths and of BGRADB.
  LtScratch stage_a, stage_a2, stage_b, stage_b2, acc, bias_out;

  const LtPlan& plan(const LtPlanKey& key, const LtPlanPointers& ptrs) {
    auto it = plans.find(key);
    if (it == plans.end()) it = plans.emplace(key, lt_plan_create(handle, key, ptrs)).first;
    return *it->second;
  }

  void execute(const LtPlan& p, const LtPlanPointers& ptrs, const void* alpha, const void* beta) {
    lt_plan_set_pointers(p, ptrs);
    QSYNC_LT_CHECK(cublasLtMatmul(handle, p.desc.get(), alpha, ptrs.a, p.a_layout.get(), ptrs.b, p.b_layout.get(), beta,
                                  ptrs.d, p.d_layout.get(), ptrs.d, p.d_layout.get(), &p.algo, workspace,
                                  CUBLASLT_WORKSPACE_BYTES, stream));
  }

  void run_float(const CudaMatmul& mm, const GemmDesc& d);
  void run_quantized(const CudaMatmul& mm, const GemmDesc& d);
  // `o` as a packed (rows, k) row-major matrix, k-contiguous, padded to (rows_p, k_p): the data
  // itself when it already is one, else a staged copy.
  const void* stage(const GemmOperand& o, int64_t rows, int64_t k, int64_t rows_p, int64_t k_p, bool k_contiguous_is_trans,
                    LtScratch& out, LtScratch& tmp);
};

CudaMatmulEngine::CudaMatmulEngine(void* stream) : impl_(std::make_unique<Impl>()) {
  impl_->stream = as_stream(stream);
  QSYNC_CUDA_CHECK(cudaMalloc(&impl_->workspace, CUBLASLT_WORKSPACE_BYTES));
  const cublasStatus_t created = cublasLtCreate(&impl_->handle);
  if (created != CUBLAS_STATUS_SUCCESS) (void)cudaFree(impl_->workspace);
  QSYNC_LT_CHECK(created);
}

CudaMatmulEngine::~CudaMatmulEngine() {
  impl_->plans.clear();  // descriptors before the handle
  for (LtScratch* s : {&impl_->stage_a, &impl_->stage_a2, &impl_->stage_b, &impl_->stage_b2, &impl_->acc, &impl_->bias_out})
    s->release(impl_->stream);
  if (impl_->handle != nullptr) (void)cublasLtDestroy(impl_->handle);
  if (impl_->workspace != nullptr) (void)cudaFree(impl_->workspace);
}

size_t CudaMatmulEngine::cached_plans() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->plans.size();
}

void* CudaMatmulEngine::stream() const { return impl_->stream; }

void CudaMatmulEngine::run(const CudaMatmul& mm) {
  const GemmDesc d = gemm_resolve(mm.gemm);
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (is_float(d.a.precision)) impl_->run_float(mm, d);
  else impl_->run_quantized(mm, d);
  QSYNC_CUDA_CHECK(cudaGetLastError());
}

// ---------------------------------------------------------------------------------------------
// FP32 / TF32 / BF16 / FP16: straight to cuBLASLt, epilogues fused where an algorithm exists.

void CudaMatmulEngine::Impl::run_float(const CudaMatmul& mm, const GemmDesc& d) {
  if (d.a.precision != d.b.precision)
    throw GemmError(std::string("gemm: cuda: floating-point operands must share a precision, got a = ") +
                    precision_name(d.a.precision) + ", b = " + precision_name(d.b.precision) + "; convert one first");
  if (mm.gemm.bias != nullptr && mm.row_sums_of_a != nullptr)
    throw GemmError("gemm: cuda: a bias and a bias gradient in one GEMM are not supported");
  if (mm.batch > 1 && (mm.gemm.bias != nullptr || mm.row_sums_of_a != nullptr))
    throw GemmError("gemm: cuda: batched GEMMs take no bias epilogue");
  LtPlanKey key;
  key.compute = d.a.precision == Precision::TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  key.scale_type = CUDA_R_32F;
  key.a_type = lt_data_type(d.b.precision);
  key.b_type = lt_data_type(d.a.precision);
  key.d_type = CUDA_R_32F;
  key.transa = d.b.trans == Transpose::YES ? CUBLAS_OP_T : CUBLAS_OP_N;
  key.transb = d.a.trans == Transpose::YES ? CUBLAS_OP_T : CUBLAS_OP_N;
  key.m = d.n;
  key.n = d.m;
  key.k = d.k;
  key.lda = d.b.ld;
  key.ldb = d.a.ld;
  key.ldd = d.ldc;
  key.batch = mm.batch;
  key.stride_a = mm.stride_b;
  key.stride_b = mm.stride_a;
  key.stride_d = mm.stride_c;
  key.epilogue = mm.gemm.bias != nullptr ? CUBLASLT_EPILOGUE_BIAS
                                    : (mm.row_sums_of_a != nullptr ? CUBLASLT_EPILOGUE_BGRADB : CUBLASLT_EPILOGUE_DEFAULT);
  LtPlanPointers ptrs{d.b.data, d.a.data, d.c, nullptr, nullptr, nullptr};
  if (mm.gemm.bias != nullptr) ptrs.bias = mm.gemm.bias;
  if (mm.row_sums_of_a != nullptr) ptrs.bias = bias_out.get(size_t(d.m) * sizeof(float), stream);
  lt_plan_key_alignments(key, ptrs);
  const LtPlan* p = &plan(key, ptrs);
  const bool fused = p->found;
  if (!fused) {  // no algorithm for the fused epilogue: the plain GEMM and a kernel
    if (key.epilogue == CUBLASLT_EPILOGUE_DEFAULT) lt_plan_no_algorithm(key);
    key.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    ptrs.bias = nullptr;
    lt_plan_key_alignments(key, ptrs);
    p = &plan(key, ptrs);
    if (!p->found) lt_plan_no_algorithm(key);
  }
  const float alpha = 1.0f, beta = d.beta;
  execute(*p, ptrs, &alpha, &beta);
  if (mm.gemm.bias != nullptr && !fused) {
    bias_rows_kernel<<<unsigned(std::min<int64_t>((d.m * d.n + 255) / 256, 65535)), 256, 0, stream>>>(d.c, d.m, d.n,
                                                                                                      d.ldc, mm.gemm.bias);
  }
  if (mm.row_sums_of_a != nullptr) {
    if (d.a.precision != Precision::FP32 && d.a.precision != Precision::TF32)
      throw GemmError("gemm: cuda: row sums of a 16-bit A operand are not taken (pass the FP32 gradient)");
    if (fused) {
      accumulate_cuda(static_cast<const float*>(ptrs.bias), mm.row_sums_of_a, d.m, stream);
    } else {
      row_sums_kernel<<<unsigned((d.m + 255) / 256), 256, 0, stream>>>(static_cast<const float*>(d.a.data), d.m, d.k,
                                                                      d.a.ld, d.a.trans == Transpose::YES,
                                                                      mm.row_sums_of_a);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// INT8 (IMMA) and FP8: TN operands padded to multiples of 16, an accumulator and the dequant
// epilogue (scales, bias, beta); FP8 with per-tensor scales writes C directly when it can.

const void* CudaMatmulEngine::Impl::stage(const GemmOperand& o, int64_t rows, int64_t k, int64_t rows_p, int64_t k_p,
                                          bool k_contiguous_is_trans, LtScratch& out, LtScratch& tmp) {
  const int elem = precision_bytes(o.precision);
  // k-contiguous: stored (rows, k) with ld >= k. Otherwise stored (k, rows) with ld >= rows.
  const bool k_contiguous = (o.trans == Transpose::YES) == k_contiguous_is_trans;
  if (k_contiguous && rows == rows_p && k == k_p && o.ld == k && lt_pointer_alignment(o.data) >= 16) return o.data;
  if (k_contiguous) {
    void* padded = out.get(size_t(rows_p * k_p * elem), stream);
    copy_2d_padded_cuda(o.data, rows, k, o.ld, padded, rows_p, k_p, k_p, elem, stream);
    return padded;
  }
  // Stored (k, rows): packed first if strided (tmp), transposed to (rows, k) (out), then padded
  // (tmp again: the packed copy is consumed by then, in stream order).
  const void* src = o.data;
  if (o.ld != rows) {
    void* packed = tmp.get(size_t(k * rows * elem), stream);
    copy_2d_padded_cuda(o.data, k, rows, o.ld, packed, k, rows, rows, elem, stream);
    src = packed;
  }
  void* t = out.get(size_t(rows * k * elem), stream);
  transpose_cuda(src, t, 1, k, rows, elem, stream);
  if (rows == rows_p && k == k_p) return t;
  void* padded = tmp.get(size_t(rows_p * k_p * elem), stream);
  copy_2d_padded_cuda(t, rows, k, k, padded, rows_p, k_p, k_p, elem, stream);
  return padded;
}

void CudaMatmulEngine::Impl::run_quantized(const CudaMatmul& mm, const GemmDesc& d) {
  const Precision pa = d.a.precision, pb = d.b.precision;
  const bool int8 = pa == Precision::INT8;
  if (int8 != (pb == Precision::INT8) || (!int8 && !(is_fp8(pa) && is_fp8(pb))))
    throw GemmError(std::string("gemm: cuda: operands ") + precision_name(pa) + " x " + precision_name(pb) +
                    " are not a GEMM cuBLASLt runs (int8 x int8, or fp8 x fp8)");
  if (pa == Precision::FP8_E5M2 && pb == Precision::FP8_E5M2)
    throw GemmError("gemm: cuda: fp8 e5m2 x e5m2 is not supported by cuBLASLt; encode one operand as e4m3");
  if (d.a.int8_unsigned || d.b.int8_unsigned)
    throw GemmError("gemm: cuda: unsigned int8 (u8) operands are not supported (cuBLASLt IMMA is s8 x s8)");
  if (mm.batch > 1 || mm.row_sums_of_a != nullptr)
    throw GemmError("gemm: cuda: int8 / fp8 GEMMs take no batch and no bias gradient");
  const int64_t m_p = round_up(d.m, 16), n_p = round_up(d.n, 16), k_p = round_up(d.k, 16);
  // Our a as (m, k) k-contiguous: untransposed; our b as (n, k) k-contiguous: transposed.
  const void* a = stage(d.a, d.m, d.k, m_p, k_p, false, stage_a, stage_a2);
  const void* b = stage(d.b, d.n, d.k, n_p, k_p, true, stage_b, stage_b2);
  LtPlanKey key;
  key.transa = CUBLAS_OP_T;
  key.transb = CUBLAS_OP_N;
  key.m = n_p;
  key.n = m_p;
  key.k = k_p;
  key.lda = k_p;
  key.ldb = k_p;
  key.a_type = lt_data_type(pb);
  key.b_type = lt_data_type(pa);
  const bool per_tensor = d.a.scale_mode != ScaleMode::PER_CHANNEL && d.b.scale_mode != ScaleMode::PER_CHANNEL;
  const bool direct = !int8 && per_tensor && m_p == d.m && n_p == d.n && d.ldc % 4 == 0 &&
                      lt_pointer_alignment(d.c) >= 16;
  EpilogueScales scales{d.a.scales, d.a.scale_mode, d.b.scales, d.b.scale_mode, mm.gemm.bias};
  if (int8) {
    key.compute = CUBLAS_COMPUTE_32I;
    key.scale_type = CUDA_R_32I;
    key.d_type = CUDA_R_32I;
  } else {
    key.compute = CUBLAS_COMPUTE_32F;
    key.scale_type = CUDA_R_32F;
    key.d_type = CUDA_R_32F;
    key.fast_accum = pa == Precision::FP8_E4M3 && pb == Precision::FP8_E4M3;  // the forward (TE's fprop recipe)
  }
  LtPlanPointers ptrs{b, a, nullptr, nullptr, nullptr, nullptr};
  if (direct) {
    key.ldd = d.ldc;
    ptrs.d = d.c;
    ptrs.a_scale = d.b.scales;  // cuBLASLt's A is our b: its dequantization factor
    ptrs.b_scale = d.a.scales;
    key.scale_pointers = true;
  } else {
    key.ldd = n_p;
    ptrs.d = acc.get(size_t(m_p * n_p) * 4, stream);
  }
  lt_plan_key_alignments(key, ptrs);
  const LtPlan& p = plan(key, ptrs);
  if (!p.found) lt_plan_no_algorithm(key);
  if (int8) {
    const int32_t alpha = 1, beta = 0;
    execute(p, ptrs, &alpha, &beta);
    gemm_dequant_epilogue_cuda(static_cast<const int32_t*>(ptrs.d), n_p, d.c, d.ldc, d.m, d.n, scales, d.beta, stream);
  } else if (direct) {
    const float alpha = 1.0f, beta = d.beta;
    execute(p, ptrs, &alpha, &beta);
    if (mm.gemm.bias != nullptr)
      bias_rows_kernel<<<unsigned(std::min<int64_t>((d.m * d.n + 255) / 256, 65535)), 256, 0, stream>>>(d.c, d.m, d.n,
                                                                                                        d.ldc, mm.gemm.bias);
  } else {
    const float alpha = 1.0f, beta = 0.0f;
    execute(p, ptrs, &alpha, &beta);
    gemm_dequant_epilogue_cuda(static_cast<const float*>(ptrs.d), n_p, d.c, d.ldc, d.m, d.n, scales, d.beta, stream);
  }
}

std::string cublaslt_version_text() { return "cuBLASLt " + std::to_string(cublasLtGetVersion()); }

}  // namespace qsync
