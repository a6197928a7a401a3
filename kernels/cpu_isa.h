// File: kernels/cpu_isa.h
// CPU instruction-set detection and the process-wide cap that device classes set. Our own
// vectorized kernels (quantize, convert) dispatch on cpu_isa_active(); oneDNN is capped with
// its own max-ISA setting by device_class_activate().
#pragma once

namespace qsync {

enum class CpuIsa : int {  // ordered: each level includes the ones before it
  SCALAR = 0,
  AVX2 = 1,         // + FMA, F16C
  AVX512 = 2,       // AVX-512 F/BW/DQ/VL + VNNI
  AVX512_BF16 = 3,  // + AVX512_BF16 (native BF16 dot products)
  AMX = 4,          // + AMX tiles (INT8, BF16)
};
const char* cpu_isa_name(CpuIsa isa);

// What the CPU (and OS) offers.
CpuIsa cpu_isa_detected();
// min(detected, cap). The cap defaults to AMX (no cap).
CpuIsa cpu_isa_active();
void cpu_isa_set_cap(CpuIsa cap);

}  // namespace qsync
