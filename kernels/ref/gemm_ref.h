// File: kernels/ref/gemm_ref.h
// The reference GEMM backend "ref": plain scalar loops with double accumulation. It accepts
// every valid signature in every precision; it is the oracle of the backend tests and the
// fallback for shapes or precisions no other backend takes.
#pragma once

#include "kernels/gemm.h"

namespace qsync {

const GemmBackend* gemm_backend_ref();

// The same computation as a free function, for tests that want the oracle directly.
void gemm_ref(const GemmDesc& d);

}  // namespace qsync
