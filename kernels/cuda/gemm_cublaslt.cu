// File: kernels/cuda/gemm_cublaslt.cu
// The registry's "cuda" backend: the support rules and a synchronous call through one
// CudaMatmulEngine per device on the legacy default stream.
#include "kernels/cuda/gemm_cublaslt.h"

#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "kernels/cuda/cuda_device.h"

namespace qsync {
namespace {

bool is_fp8(Precision p) { return p == Precision::FP8_E4M3 || p == Precision::FP8_E5M2; }

GemmSupport unsupported(const std::string& detail) { return {SupportLevel::UNSUPPORTED, detail}; }
GemmSupport native(const std::string& detail) { return {SupportLevel::NATIVE, detail}; }

std::string sm_name(int sm) { return "sm" + std::to_string(sm); }

// "" when the signature needs no staging on cuBLASLt's INT8 / FP8 path, else what is staged.
std::string staging_note(const GemmSignature& s) {
  std::string why;
  if (s.a_trans != Transpose::NO || s.b_trans != Transpose::YES) why = "transposed into the TN layout";
  if (s.m % 16 != 0 || s.n % 16 != 0 || s.k % 16 != 0) why += std::string(why.empty() ? "" : " and ") + "padded to multiples of 16";
  return why.empty() ? "" : "; operands " + why + " first";
}

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
  const int need = std::max(precision_traits(pa).cuda_native_sm, precision_traits(pb).cuda_native_sm);
  if (sm < need)
    return unsupported(std::string("cuda: ") + precision_name(pa) + " needs " + sm_name(need) +
                       "+ tensor cores (device is " + sm_name(sm) + ")");
  switch (pa) {
    case Precision::FP32: return native("cuBLASLt fp32 (compute 32F, the CUDA cores)");
    case Precision::TF32: return native("cuBLASLt tf32 tensor cores (compute 32F_FAST_TF32)");
    case Precision::FP16: return native("cuBLASLt fp16 x fp16 -> fp32 (compute 32F)");
    case Precision::BF16: return native("cuBLASLt bf16 x bf16 -> fp32 (compute 32F)");
    case Precision::INT8: return native("cuBLASLt int8 IMMA (s8 x s8 -> s32) + dequant epilogue" + staging_note(s));
    case Precision::FP8_E4M3:
    case Precision::FP8_E5M2:
      if (pa == Precision::FP8_E5M2 && pb == Precision::FP8_E5M2)
        return unsupported("cuda: fp8 e5m2 x e5m2 is not supported by cuBLASLt; encode one operand as e4m3");
      return native(std::string("cuBLASLt fp8 ") + precision_name(pa) + " x " + precision_name(pb) +
                    " -> fp32 (compute 32F)" + staging_note(s));
  }
  return unsupported("cuda: unknown precision");
}

namespace {

class GemmBackendCuda final : public GemmBackend {
 public:
  const char* name() const override { return "cuda"; }

  GemmSupport supports(const GemmSignature& s) const override {
    if (cuda_device_count() == 0) return unsupported("no CUDA device");
    return gemm_cuda_supports_for_sm(s, cuda_device_sm(cuda_current_device()));
  }

  void gemm(const GemmDesc& d) const override {
    gemm_validate(d);
    const GemmSupport support = supports(gemm_signature(d));
    if (!support.ok()) throw GemmError("gemm: " + support.detail);
    const int device = cuda_current_device();
    std::lock_guard<std::mutex> lock(mu_);
    std::unique_ptr<CudaMatmulEngine>& engine = (*engines_)[device];
    if (!engine) engine = std::make_unique<CudaMatmulEngine>(nullptr);  // the legacy default stream
    CudaMatmul mm;
    mm.gemm = d;
    engine->run(mm);
    QSYNC_CUDA_CHECK(cudaStreamSynchronize(nullptr));
  }

 private:
  // Never freed: releasing CUDA resources from a static destructor can run after the CUDA
  // runtime has shut down. The process exit returns them.
  mutable std::mutex mu_;
  std::map<int, std::unique_ptr<CudaMatmulEngine>>* engines_ = new std::map<int, std::unique_ptr<CudaMatmulEngine>>();
};

}  // namespace

const GemmBackend* gemm_backend_cuda() {
  static const GemmBackendCuda* backend = new GemmBackendCuda();  // touches no GPU until the first call
  return backend;
}

}  // namespace qsync
