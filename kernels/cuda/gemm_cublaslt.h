// File: kernels/cuda/gemm_cublaslt.h
// The "cuda" GEMM backend of the registry (kernels/gemm_registry.h) on the one cuBLASLt wrapper
// (kernels/cuda/cublaslt_matmul.h). All pointers in a GemmDesc (data, scales, c) are device
// pointers on the calling thread's current device. Calls are synchronous (the training ops use
// CudaMatmulEngine directly, asynchronously on their stream).
//
//   FP32  compute 32F (the CUDA cores; no TF32)    any layout
//   TF32  compute 32F_FAST_TF32                    any layout, sm80+
//   FP16  fp16 inputs, fp32 out, 32F               any layout, sm70+
//   BF16  bf16 inputs, fp32 out, 32F               any layout, sm80+
//   INT8  IMMA s8 x s8 -> s32 + a dequant epilogue, sm75+; s8 only
//   FP8   e4m3 x e4m3, e4m3 x e5m2, e5m2 x e4m3 (not e5m2 x e5m2), compute 32F, sm89+
// INT8 and FP8 take any layout and shape: operands that are not "TN" (both k-contiguous) with
// dimensions multiples of 16 are staged (transposed / zero-padded) into scratch first; `supports`
// says so in its detail. The compute capabilities come from the precision table
// (kernels/precision.h: cuda_native_sm).
#pragma once

#include "kernels/cuda/cublaslt_matmul.h"
#include "kernels/gemm.h"

namespace qsync {

const GemmBackend* gemm_backend_cuda();

// The rules of `supports` for a device of compute capability `sm` (major * 10 + minor; 0 means
// no device). Pure: it touches no GPU, so the rules are testable on any machine.
GemmSupport gemm_cuda_supports_for_sm(const GemmSignature& s, int sm);

}  // namespace qsync
