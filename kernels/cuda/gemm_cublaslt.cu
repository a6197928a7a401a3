// File: kernels/cuda/gemm_cublaslt.cu
// The "cuda" GEMM backend on cuBLASLt (see gemm_cublaslt.h for what it takes).
//
// Row-major to column-major: our C (m, n) row-major with row stride ldc is, read column-major,
// C^T (n rows, m cols) with ld = ldc. cuBLASLt computes D = op(A) * op(B) column-major, so we ask
// it for C^T = opB^T * opA^T: cuBLASLt's A is our B, its B is our A, its (m, n, k) is our (n, m, k).
//   our b.trans NO  : B stored (k, n) row-major = (n rows, k cols) col-major -> transa = N
//   our b.trans YES : B stored (n, k) row-major = (k rows, n cols) col-major -> transa = T
//   our a.trans NO  : A stored (m, k) row-major = (k rows, m cols) col-major -> transb = N
//   our a.trans YES : A stored (k, m) row-major = (m rows, k cols) col-major -> transb = T
// IMMA and FP8 kernels take only "TN" (transa = T, transb = N), i.e. our a.trans = NO and
// b.trans = YES: the forward case X * W^T. The gradient cases need an explicit transpose first.
#include "kernels/cuda/gemm_cublaslt.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>

#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/quantize_cuda.h"

namespace qsync {
namespace {

bool is_fp8(Precision p) { return p == Precision::FP8_E4M3 || p == Precision::FP8_E5M2; }
int64_t round_up(int64_t x, int64_t multiple) { return (x + multiple - 1) / multiple * multiple; }
const char* trans_name(Transpose t) { return t == Transpose::NO ? "NO" : "YES"; }

GemmSupport unsupported(const std::string& detail) { return {SupportLevel::UNSUPPORTED, detail}; }
GemmSupport native(const std::string& detail) { return {SupportLevel::NATIVE, detail}; }

struct LeadingDims {
  int64_t lda, ldb, ldc;
};
LeadingDims resolve_lds(const GemmSignature& s) {
  return {s.lda != 0 ? s.lda : (s.a_trans == Transpose::NO ? s.k : s.m),
          s.ldb != 0 ? s.ldb : (s.b_trans == Transpose::NO ? s.n : s.k), s.ldc != 0 ? s.ldc : s.n};
}

// "int8 on cuda needs k to be a multiple of 4 (cuBLASLt IMMA), got k = 30: pad k to 32"
std::optional<std::string> multiple_problem(const std::string& what, const char* dim, int64_t value,
                                            int64_t multiple) {
  if (value % multiple == 0) return std::nullopt;
  return what + " needs " + dim + " to be a multiple of " + std::to_string(multiple) + ", got " + dim + " = " +
         std::to_string(value) + ": pad " + dim + " to " + std::to_string(round_up(value, multiple));
}

// IMMA and FP8 take only the forward layout; names the operand(s) to transpose.
std::optional<std::string> layout_problem(const std::string& what, const GemmSignature& s) {
  const bool a_bad = s.a_trans != Transpose::NO, b_bad = s.b_trans != Transpose::YES;
  if (!a_bad && !b_bad) return std::nullopt;
  const char* fix = a_bad && b_bad ? "a and b" : (a_bad ? "a" : "b");
  return what + " needs the forward (\"TN\") layout with both operands k-contiguous: a stored (m, k) with "
         "a.trans = NO and b stored (n, k) with b.trans = YES; got a.trans = " + trans_name(s.a_trans) +
         ", b.trans = " + trans_name(s.b_trans) + ": transpose " + fix + " explicitly first";
}

std::optional<std::string> first_problem(std::initializer_list<std::optional<std::string>> checks) {
  for (const auto& c : checks)
    if (c) return c;
  return std::nullopt;
}

std::string sm_name(int sm) { return "sm" + std::to_string(sm); }

}  // namespace

GemmSupport gemm_cuda_supports_for_sm(const GemmSignature& s, int sm) {
  if (sm <= 0) return unsupported("no CUDA device");
  if (s.m <= 0 || s.n <= 0 || s.k <= 0) return unsupported("cuda: sizes must be positive");
  if (s.a_int8_unsigned)
    return unsupported("cuda: unsigned int8 (u8) operands are not supported (cuBLASLt IMMA is s8 x s8); "
                       "quantize a as signed int8 or use the cpu backend");
  const Precision pa = s.a_precision, pb = s.b_precision;
  if (pa != pb && !(is_fp8(pa) && is_fp8(pb)))
    return unsupported(std::string("cuda: operand precisions must match (or both be fp8), got a = ") +
                       precision_name(pa) + ", b = " + precision_name(pb) + "; convert one operand first");
  const LeadingDims ld = resolve_lds(s);
  const std::string on = " (device is " + sm_name(sm) + ")";
  switch (pa) {
    case Precision::FP32:
      return native("cuBLASLt fp32 (compute 32F)");
    case Precision::TF32:
      if (sm < 80) return unsupported("cuda: tf32 needs TF32 tensor cores (sm80+)" + on + "; use fp32");
      return native("cuBLASLt tf32 tensor cores (compute 32F_FAST_TF32)");
    case Precision::FP16:
      if (sm < 70) return unsupported("cuda: fp16 needs tensor cores (sm70+)" + on + "; use fp32");
      return native("cuBLASLt fp16 x fp16 -> fp32 (compute 32F)");
    case Precision::BF16:
      if (sm < 80) return unsupported("cuda: bf16 needs sm80+" + on + "; use fp16 or fp32");
      return native("cuBLASLt bf16 x bf16 -> fp32 (compute 32F)");
    case Precision::INT8: {
      if (sm < 75) return unsupported("cuda: int8 needs IMMA tensor cores (sm75+)" + on);
      const std::string what = "cuda: int8 (cuBLASLt IMMA)";
      // cuBLASLt's m is our n (see the mapping above); our m is its n, which IMMA leaves free.
      if (auto p = first_problem({layout_problem(what, s), multiple_problem(what, "k", s.k, 4),
                                  multiple_problem(what, "n", s.n, 4), multiple_problem(what, "lda", ld.lda, 4),
                                  multiple_problem(what, "ldb", ld.ldb, 4)}))
        return unsupported(*p);
      return native("cuBLASLt int8 IMMA (s8 x s8 -> s32) + dequant epilogue");
    }
    case Precision::FP8_E4M3:
    case Precision::FP8_E5M2: {
      if (sm < 89) return unsupported("cuda: fp8 needs FP8 tensor cores (sm89+)" + on + "; use bf16/fp16 or int8");
      if (pa == Precision::FP8_E5M2 && pb == Precision::FP8_E5M2)
        return unsupported("cuda: fp8 e5m2 x e5m2 is not supported by cuBLASLt; encode one operand as e4m3");
      const std::string what = "cuda: fp8 (cuBLASLt)";
      if (auto p = first_problem({layout_problem(what, s), multiple_problem(what, "m", s.m, 16),
                                  multiple_problem(what, "n", s.n, 16), multiple_problem(what, "k", s.k, 16),
                                  multiple_problem(what, "lda", ld.lda, 16),
                                  multiple_problem(what, "ldb", ld.ldb, 16)}))
        return unsupported(*p);
      return native(std::string("cuBLASLt fp8 ") + precision_name(pa) + " x " + precision_name(pb) +
                    " -> fp32 (compute 32F)");
    }
  }
  return unsupported("cuda: unknown precision");
}

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

void lt_check(cublasStatus_t st, const char* what, const char* file, int line) {
  if (st == CUBLAS_STATUS_SUCCESS) return;
  throw std::runtime_error(std::string(file) + ":" + std::to_string(line) + ": " + what + " failed: " +
                           lt_status_name(st) + " (" + std::to_string(int(st)) + ")");
}
#define QSYNC_LT_CHECK(call) lt_check((call), #call, __FILE__, __LINE__)

// RAII for the cuBLASLt descriptors.
struct DescDestroy {
  void operator()(cublasLtMatmulDesc_t p) const { (void)cublasLtMatmulDescDestroy(p); }
  void operator()(cublasLtMatrixLayout_t p) const { (void)cublasLtMatrixLayoutDestroy(p); }
  void operator()(cublasLtMatmulPreference_t p) const { (void)cublasLtMatmulPreferenceDestroy(p); }
};
template <typename Handle>
using LtOwned = std::unique_ptr<std::remove_pointer_t<Handle>, DescDestroy>;

// Per-device state: the cuBLASLt handle, its 32 MiB workspace, and the accumulator buffer of the
// epilogue paths (grown on demand). One GEMM at a time per device (mu).
struct DeviceState {
  std::mutex mu;
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  void* acc = nullptr;
  size_t acc_bytes = 0;
};

DeviceState& device_state(int device) {
  static std::mutex map_mu;
  // Never freed: releasing CUDA resources from a static destructor can run after the CUDA
  // runtime has shut down. The process exit returns them.
  static auto* states = new std::map<int, std::unique_ptr<DeviceState>>();
  std::lock_guard<std::mutex> lock(map_mu);
  std::unique_ptr<DeviceState>& slot = (*states)[device];
  if (!slot) {
    auto st = std::make_unique<DeviceState>();
    QSYNC_CUDA_CHECK(cudaMalloc(&st->workspace, CUBLASLT_WORKSPACE_BYTES));
    const cublasStatus_t created = cublasLtCreate(&st->handle);
    if (created != CUBLAS_STATUS_SUCCESS) (void)cudaFree(st->workspace);
    QSYNC_LT_CHECK(created);
    slot = std::move(st);
  }
  return *slot;
}

void* acc_buffer(DeviceState& st, size_t bytes) {
  if (bytes > st.acc_bytes) {
    if (st.acc != nullptr) QSYNC_CUDA_CHECK(cudaFree(st.acc));
    st.acc = nullptr;
    st.acc_bytes = 0;
    QSYNC_CUDA_CHECK(cudaMalloc(&st.acc, bytes));
    st.acc_bytes = bytes;
  }
  return st.acc;
}

cudaDataType_t lt_type(Precision p) {
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

// Largest power of two (at most 256, cuBLASLt's default assumption) dividing the address.
uint32_t pointer_alignment(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  uint32_t alignment = 256;
  while (alignment > 1 && address % alignment != 0) alignment >>= 1;
  return alignment;
}

// One cublasLtMatmul, in cuBLASLt's column-major terms (A is our b, B is our a).
struct LtMatmul {
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  cudaDataType_t scale_type = CUDA_R_32F;  // type of alpha and beta
  cudaDataType_t a_type = CUDA_R_32F, b_type = CUDA_R_32F, d_type = CUDA_R_32F;
  cublasOperation_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
  int64_t m = 0, n = 0, k = 0;  // D is (m, n) column-major
  const void* a = nullptr;
  int64_t lda = 0;
  const void* b = nullptr;
  int64_t ldb = 0;
  void* d = nullptr;  // also C (in place)
  int64_t ldd = 0;
  const float* a_scale = nullptr;  // FP8 per-tensor scales (device), nullptr: 1
  const float* b_scale = nullptr;
  const void* alpha = nullptr;  // host pointers of scale_type
  const void* beta = nullptr;
};

LtOwned<cublasLtMatrixLayout_t> make_layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld) {
  cublasLtMatrixLayout_t layout = nullptr;
  QSYNC_LT_CHECK(cublasLtMatrixLayoutCreate(&layout, type, uint64_t(rows), uint64_t(cols), ld));
  return LtOwned<cublasLtMatrixLayout_t>(layout);
}

template <typename T>
void set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const T& value) {
  QSYNC_LT_CHECK(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)));
}
template <typename T>
void set_pref(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, const T& value) {
  QSYNC_LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof(value)));
}

void run_lt_matmul(DeviceState& st, const LtMatmul& mm, cudaStream_t stream) {
  cublasLtMatmulDesc_t raw_desc = nullptr;
  QSYNC_LT_CHECK(cublasLtMatmulDescCreate(&raw_desc, mm.compute, mm.scale_type));
  LtOwned<cublasLtMatmulDesc_t> desc(raw_desc);
  set_desc(desc.get(), CUBLASLT_MATMUL_DESC_TRANSA, int32_t(mm.transa));
  set_desc(desc.get(), CUBLASLT_MATMUL_DESC_TRANSB, int32_t(mm.transb));
  if (mm.a_scale != nullptr) set_desc(desc.get(), CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(mm.a_scale));
  if (mm.b_scale != nullptr) set_desc(desc.get(), CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(mm.b_scale));

  // Stored shapes: op(A) is (m, k), op(B) is (k, n).
  const bool ta = mm.transa != CUBLAS_OP_N, tb = mm.transb != CUBLAS_OP_N;
  auto a_layout = make_layout(mm.a_type, ta ? mm.k : mm.m, ta ? mm.m : mm.k, mm.lda);
  auto b_layout = make_layout(mm.b_type, tb ? mm.n : mm.k, tb ? mm.k : mm.n, mm.ldb);
  auto d_layout = make_layout(mm.d_type, mm.m, mm.n, mm.ldd);

  cublasLtMatmulPreference_t raw_pref = nullptr;
  QSYNC_LT_CHECK(cublasLtMatmulPreferenceCreate(&raw_pref));
  LtOwned<cublasLtMatmulPreference_t> pref(raw_pref);
  set_pref(pref.get(), CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, uint64_t(CUBLASLT_WORKSPACE_BYTES));
  // The heuristic assumes 256-byte aligned buffers unless told otherwise.
  set_pref(pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, pointer_alignment(mm.a));
  set_pref(pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, pointer_alignment(mm.b));
  set_pref(pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, pointer_alignment(mm.d));
  set_pref(pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, pointer_alignment(mm.d));

  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  const cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(st.handle, desc.get(), a_layout.get(), b_layout.get(),
                                                           d_layout.get(), d_layout.get(), pref.get(), 1,
                                                           &heuristic, &found);
  if (hs == CUBLAS_STATUS_NOT_SUPPORTED || (hs == CUBLAS_STATUS_SUCCESS && found == 0))
    throw GemmError("gemm: cuda: cuBLASLt has no algorithm for this GEMM (cuBLASLt m=" + std::to_string(mm.m) +
                    " n=" + std::to_string(mm.n) + " k=" + std::to_string(mm.k) +
                    "); check alignment of the data pointers or use another backend");
  QSYNC_LT_CHECK(hs);
  QSYNC_LT_CHECK(cublasLtMatmul(st.handle, desc.get(), mm.alpha, mm.a, a_layout.get(), mm.b, b_layout.get(), mm.beta,
                                mm.d, d_layout.get(), mm.d, d_layout.get(), &heuristic.algo, st.workspace,
                                CUBLASLT_WORKSPACE_BYTES, stream));
}

void check_data_alignment(const char* which, const void* p, uint32_t required, Precision prec) {
  if (pointer_alignment(p) >= required) return;
  throw GemmError(std::string("gemm: cuda: ") + precision_name(prec) + " operand " + which +
                  " data pointer is not " + std::to_string(required) + "-byte aligned (cuBLASLt requirement); "
                  "pass a buffer from cudaMalloc or offset it by a multiple of " + std::to_string(required) + " bytes");
}

class GemmBackendCuda final : public GemmBackend {
 public:
  const char* name() const override { return "cuda"; }

  GemmSupport supports(const GemmSignature& s) const override {
    if (cuda_device_count() == 0) return unsupported("no CUDA device");
    return gemm_cuda_supports_for_sm(s, cuda_device_sm(cuda_current_device()));
  }

  void gemm(const GemmDesc& d) const override {
    gemm_validate(d);
    const GemmSignature sig = gemm_signature(d);
    const GemmSupport support = supports(sig);
    if (!support.ok()) throw GemmError("gemm: " + support.detail);
    const LeadingDims ld = resolve_lds(sig);
    const Precision pa = d.a.precision;
    if (pa == Precision::INT8 || is_fp8(pa)) {
      const uint32_t required = pa == Precision::INT8 ? 4 : 16;
      check_data_alignment("a", d.a.data, required, pa);
      check_data_alignment("b", d.b.data, required, d.b.precision);
    }

    DeviceState& st = device_state(cuda_current_device());
    std::lock_guard<std::mutex> lock(st.mu);
    // Synchronous for now: everything runs on the legacy default stream and is waited for at
    // the end. A stream argument in GemmDesc would make this asynchronous.
    cudaStream_t stream = nullptr;

    LtMatmul mm;
    mm.a_type = lt_type(d.b.precision);
    mm.b_type = lt_type(pa);
    mm.transa = d.b.trans == Transpose::YES ? CUBLAS_OP_T : CUBLAS_OP_N;
    mm.transb = d.a.trans == Transpose::YES ? CUBLAS_OP_T : CUBLAS_OP_N;
    mm.m = d.n;
    mm.n = d.m;
    mm.k = d.k;
    mm.a = d.b.data;
    mm.lda = ld.ldb;
    mm.b = d.a.data;
    mm.ldb = ld.lda;
    const EpilogueScales scales{d.a.scales, d.a.scale_mode, d.b.scales, d.b.scale_mode};
    // The accumulator of the epilogue paths: (m, n) row-major = cuBLASLt (n, m) column-major,
    // row stride a multiple of 4 elements (16 bytes), as IMMA wants for its output.
    const int64_t ld_acc = round_up(d.n, 4);
    const size_t acc_bytes = size_t(d.m) * size_t(ld_acc) * 4;

    if (pa == Precision::INT8) {
      const int32_t alpha = 1, beta = 0;
      mm.compute = CUBLAS_COMPUTE_32I;
      mm.scale_type = CUDA_R_32I;
      mm.d_type = CUDA_R_32I;
      mm.d = acc_buffer(st, acc_bytes);
      mm.ldd = ld_acc;
      mm.alpha = &alpha;
      mm.beta = &beta;
      run_lt_matmul(st, mm, stream);
      gemm_dequant_epilogue_cuda(static_cast<const int32_t*>(mm.d), ld_acc, d.c, ld.ldc, d.m, d.n, scales, d.beta,
                                 stream);
    } else if (is_fp8(pa)) {
      const float alpha = 1.0f;
      mm.compute = CUBLAS_COMPUTE_32F;
      mm.scale_type = CUDA_R_32F;
      mm.d_type = CUDA_R_32F;
      mm.alpha = &alpha;
      // Per-tensor scales fold into cuBLASLt (D = sa * sb * A B + beta C) when C is 16-byte
      // aligned; per-channel scales or an unaligned C go through the accumulator and epilogue.
      const bool direct = d.a.scale_mode != ScaleMode::PER_CHANNEL && d.b.scale_mode != ScaleMode::PER_CHANNEL &&
                          ld.ldc % 4 == 0 && pointer_alignment(d.c) >= 16;
      if (direct) {
        mm.a_scale = d.b.scales;
        mm.b_scale = d.a.scales;
        mm.d = d.c;
        mm.ldd = ld.ldc;
        mm.beta = &d.beta;
        run_lt_matmul(st, mm, stream);
      } else {
        const float beta = 0.0f;
        mm.d = acc_buffer(st, acc_bytes);
        mm.ldd = ld_acc;
        mm.beta = &beta;
        run_lt_matmul(st, mm, stream);
        gemm_dequant_epilogue_cuda(static_cast<const float*>(mm.d), ld_acc, d.c, ld.ldc, d.m, d.n, scales, d.beta,
                                   stream);
      }
    } else {
      const float alpha = 1.0f;
      mm.compute = pa == Precision::TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
      mm.scale_type = CUDA_R_32F;
      mm.d_type = CUDA_R_32F;
      mm.d = d.c;
      mm.ldd = ld.ldc;
      mm.alpha = &alpha;
      mm.beta = &d.beta;
      run_lt_matmul(st, mm, stream);
    }
    QSYNC_CUDA_CHECK(cudaGetLastError());
    QSYNC_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
};

}  // namespace

const GemmBackend* gemm_backend_cuda() {
  static const GemmBackendCuda backend;  // touches no GPU until the first call
  return &backend;
}

}  // namespace qsync
