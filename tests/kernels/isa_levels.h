// File: tests/kernels/isa_levels.h
// The ISA levels a test runs the vectorized CPU kernels at (the plain loops, SCALAR, plus every
// level this machine has), and a scope that caps the active ISA at one of them.
//
//   for (CpuIsa isa : testing::isa_levels()) {
//     testing::IsaCap cap(isa);
//     ...  // the kernels dispatch as on a CPU of that level
//   }
#pragma once

#include <vector>

#include "kernels/cpu_isa.h"

namespace qsync::testing {

inline std::vector<CpuIsa> isa_levels() {
  std::vector<CpuIsa> levels{CpuIsa::SCALAR};
  for (CpuIsa isa : {CpuIsa::AVX2, CpuIsa::AVX512, CpuIsa::AVX512_BF16, CpuIsa::AMX})
    if (cpu_isa_detected() >= isa) levels.push_back(isa);
  return levels;
}

struct IsaCap {  // caps the ISA for one scope; the default cap (none: AMX) comes back after
  explicit IsaCap(CpuIsa isa) { cpu_isa_set_cap(isa); }
  ~IsaCap() { cpu_isa_set_cap(CpuIsa::AMX); }
  IsaCap(const IsaCap&) = delete;
  IsaCap& operator=(const IsaCap&) = delete;
};

}  // namespace qsync::testing
