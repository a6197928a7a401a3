// File: kernels/cpu/gemm_onednn.h
// The "cpu" GEMM backend on oneDNN's matmul primitive: FP32, BF16, INT8 (u8s8 / s8s8, int32
// accumulation, scales applied as oneDNN output scales) natively where the active ISA has them;
// TF32, FP16 and FP8 (and BF16/INT8 on ISAs without a JIT kernel) emulated by decoding the
// operands to FP32, reported as such by `supports`.
#pragma once

#include <string>

#include "kernels/gemm.h"

namespace qsync {

const GemmBackend* gemm_backend_cpu();

// The largest |value| of INT8 A operands that the cpu backend computes natively on a CPU without
// VNNI (7-bit "reduce_range" quantization); wider A runs exactly through FP32 there.
inline constexpr int INT8_REDUCED_RANGE_MAX = 63;
// The quantization limit for INT8 activations (A operands) under the active ISA: 127 with VNNI
// (or AMX), INT8_REDUCED_RANGE_MAX without.
int cpu_int8_activation_max();

// The oneDNN implementation oneDNN picks for a forward-shaped (x * w^T) GEMM of this precision
// under the current ISA cap, e.g. "brg:avx512_core_vnni", or "" when it has none.
std::string onednn_matmul_impl(Precision p);

}  // namespace qsync
