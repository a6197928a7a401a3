// File: kernels/gemm_registry.cpp
// The one list of GEMM backends.
#include "kernels/gemm_registry.h"

#include <stdexcept>
#include <string>

#include "kernels/cpu/gemm_onednn.h"
#include "kernels/ref/gemm_ref.h"
#if defined(QSYNC_WITH_CUDA)
#include "kernels/cuda/gemm_cublaslt.h"
#endif

namespace qsync {

const std::vector<const GemmBackend*>& gemm_backends() {
  static const std::vector<const GemmBackend*> backends = {
      gemm_backend_ref(),
      gemm_backend_cpu(),
#if defined(QSYNC_WITH_CUDA)
      gemm_backend_cuda(),
#endif
  };
  return backends;
}

const GemmBackend& gemm_backend_by_name(std::string_view name) {
  std::string known;
  for (const GemmBackend* b : gemm_backends()) {
    if (name == b->name()) return *b;
    known += known.empty() ? "" : ", ";
    known += b->name();
  }
  throw std::invalid_argument("unknown GEMM backend '" + std::string(name) + "'; registered backends: " + known +
                              (name == "cuda" ? " (this build has no CUDA: configure with -DQSYNC_ENABLE_CUDA=ON)" : ""));
}

const GemmBackend& gemm_backend_for_host(const GemmSignature& s) {
  // The oneDNN backend is faster than the scalar loops even when it emulates a precision.
  const GemmBackend& cpu = *gemm_backend_cpu();
  return cpu.supports(s).ok() ? cpu : *gemm_backend_ref();
}

}  // namespace qsync
