// File: kernels/cuda/gemm_cublaslt.h
// The "cuda" GEMM backend on cuBLASLt. All pointers in a GemmDesc (data, scales, c) are device
// pointers on the calling thread's current device. Calls are synchronous.
//
//   FP32  compute 32F                      any layout
//   TF32  compute 32F_FAST_TF32            any layout, sm80+
//   FP16  fp16 inputs, fp32 out, 32F       any layout
//   BF16  bf16 inputs, fp32 out, 32F       any layout, sm80+
//   INT8  IMMA s8 x s8 -> s32, then a dequant epilogue applies the scales; sm75+;
//         forward layout only (a.trans = NO, b.trans = YES: both operands k-contiguous),
//         n and k multiples of 4, lda and ldb multiples of 4, data 4-byte aligned; s8 only
//   FP8   e4m3 x e4m3, e4m3 x e5m2, e5m2 x e4m3 (not e5m2 x e5m2), compute 32F, fp32 out; sm89+;
//         forward layout only, m, n, k, lda and ldb multiples of 16, data 16-byte aligned;
//         per-tensor scales go to cuBLASLt's A/B scale pointers, per-channel ones to the epilogue
// Layouts the backend cannot take are UNSUPPORTED in `supports` with a detail that says which
// layout is needed (the caller transposes explicitly); nothing is silently miscomputed.
#pragma once

#include "kernels/gemm.h"

namespace qsync {

const GemmBackend* gemm_backend_cuda();

// The rules of `supports` for a device of compute capability `sm` (major * 10 + minor; 0 means
// no device). Pure: it touches no GPU, so the rules are testable on any machine.
GemmSupport gemm_cuda_supports_for_sm(const GemmSignature& s, int sm);

// Bytes of cuBLASLt workspace held per device.
inline constexpr size_t CUBLASLT_WORKSPACE_BYTES = size_t(32) << 20;

}  // namespace qsync
