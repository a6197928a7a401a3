// File: kernels/gemm_registry.h
// The one list of GEMM backends: "ref" (plain loops, the oracle and fallback), "cpu" (oneDNN),
// and "cuda" (cuBLASLt, present when built with QSYNC_ENABLE_CUDA).
#pragma once

#include <string_view>
#include <vector>

#include "kernels/gemm.h"

namespace qsync {

const std::vector<const GemmBackend*>& gemm_backends();

// Throws std::invalid_argument listing the registered names when `name` is unknown.
const GemmBackend& gemm_backend_by_name(std::string_view name);

// The first host backend (cpu, then ref) whose `supports` accepts `s` natively, else the
// first that accepts it at all. `ref` accepts every valid signature.
const GemmBackend& gemm_backend_for_host(const GemmSignature& s);

}  // namespace qsync
