// File: kernels/cpu_isa.cpp
// CPU instruction-set detection (cpuid for what the CPU has, xgetbv for what the OS saves on a
// context switch) and the process-wide ISA cap that device classes set.
#include "kernels/cpu_isa.h"

#include <atomic>
#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define QSYNC_X86 1
#endif

namespace qsync {
namespace {

#ifdef QSYNC_X86
bool bit(uint32_t reg, int b) { return ((reg >> b) & 1u) != 0; }

// XCR0: the register state the OS enables (and saves). Only valid when CPUID.1:ECX.OSXSAVE is set.
uint64_t read_xcr0() {
  uint32_t lo = 0;
  uint32_t hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

CpuIsa detect() {
  uint32_t eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_max(0, nullptr) < 7) return CpuIsa::SCALAR;
  __get_cpuid(1, &eax, &ebx, &ecx, &edx);
  const bool fma = bit(ecx, 12);
  const bool osxsave = bit(ecx, 27);
  const bool avx = bit(ecx, 28);
  const bool f16c = bit(ecx, 29);
  if (!osxsave || !avx) return CpuIsa::SCALAR;

  const uint64_t xcr0 = read_xcr0();
  const bool os_ymm = (xcr0 & 0x6) == 0x6;                // bit 1 SSE (XMM), bit 2 AVX (upper YMM)
  const bool os_zmm = (xcr0 & 0xe6) == 0xe6;              // + bit 5 opmask, 6 ZMM_Hi256, 7 Hi16_ZMM
  const uint64_t amx_bits = (1ull << 17) | (1ull << 18);  // XTILECFG, XTILEDATA
  const bool os_amx = (xcr0 & amx_bits) == amx_bits;

  __cpuid_count(7, 0, eax, ebx, ecx, edx);
  const uint32_t max_subleaf7 = eax;
  const bool avx2 = bit(ebx, 5);
  const bool avx512f = bit(ebx, 16);
  const bool avx512dq = bit(ebx, 17);
  const bool avx512bw = bit(ebx, 30);
  const bool avx512vl = bit(ebx, 31);
  const bool avx512vnni = bit(ecx, 11);
  const bool amx_bf16 = bit(edx, 22);
  const bool amx_tile = bit(edx, 24);
  const bool amx_int8 = bit(edx, 25);
  bool avx512bf16 = false;
  if (max_subleaf7 >= 1) {
    __cpuid_count(7, 1, eax, ebx, ecx, edx);
    avx512bf16 = bit(eax, 5);
  }

  // Each level includes the ones before it: stop at the first one that is missing.
  if (!(avx2 && fma && f16c && os_ymm)) return CpuIsa::SCALAR;
  if (!(avx512f && avx512bw && avx512dq && avx512vl && avx512vnni && os_zmm)) return CpuIsa::AVX2;
  if (!avx512bf16) return CpuIsa::AVX512;
  // Linux also wants arch_prctl(ARCH_REQ_XCOMP_PERM) before the first tile instruction;
  // oneDNN, the only AMX user, makes that request itself.
  if (!(amx_tile && amx_int8 && amx_bf16 && os_amx)) return CpuIsa::AVX512_BF16;
  return CpuIsa::AMX;
}
#else
CpuIsa detect() { return CpuIsa::SCALAR; }
#endif

std::atomic<int> g_cap{static_cast<int>(CpuIsa::AMX)};

}  // namespace

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::SCALAR: return "scalar";
    case CpuIsa::AVX2: return "avx2";
    case CpuIsa::AVX512: return "avx512";
    case CpuIsa::AVX512_BF16: return "avx512-bf16";
    case CpuIsa::AMX: return "amx";
  }
  return "unknown";
}

CpuIsa cpu_isa_detected() {
  static const CpuIsa detected = detect();
  return detected;
}

CpuIsa cpu_isa_active() {
  const int detected = static_cast<int>(cpu_isa_detected());
  const int cap = g_cap.load(std::memory_order_relaxed);
  return static_cast<CpuIsa>(detected < cap ? detected : cap);
}

void cpu_isa_set_cap(CpuIsa cap) { g_cap.store(static_cast<int>(cap), std::memory_order_relaxed); }

}  // namespace qsync
