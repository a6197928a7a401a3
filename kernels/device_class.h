// File: kernels/device_class.h
// Device classes: the named kinds of device a rank runs as. On the CPU a class caps the
// instruction set (oneDNN's max ISA and our own kernels) and the thread count, which gives
// real, different per-precision speeds on one machine: the project's stand-ins for the
// training and inference GPUs of a hybrid pool. CUDA classes name a compute capability.
//
//   const DeviceClass& c = device_class_by_name("cpu-avx2");
//   device_class_activate(c, /*threads=*/1);   // once, before the first GEMM
//   for (auto& cap : device_class_capabilities(c)) ...
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "kernels/cpu_isa.h"
#include "kernels/gemm.h"
#include "kernels/precision.h"

namespace qsync {

enum class DeviceKind : uint8_t { CPU, CUDA };

struct DeviceClass {
  std::string name;         // "cpu-amx", "cpu-avx512", "cpu-avx2", "cuda-sm75", ...
  DeviceKind kind;
  CpuIsa cpu_isa_cap;       // CPU classes: the instruction-set cap
  int cuda_sm;              // CUDA classes: compute capability * 10 (75, 80, 89, 90)
  std::string description;
};

const std::vector<DeviceClass>& device_classes();
// Throws std::invalid_argument listing the known classes when `name` is unknown.
const DeviceClass& device_class_by_name(std::string_view name);

struct DeviceAvailability {
  bool available = false;
  std::string note;  // why not, or what it runs as ("cpu-amx on a CPU without AMX: runs as ...")
};
DeviceAvailability device_class_availability(const DeviceClass& c);
// The strongest available CPU class not above `c` (cpu-amx -> cpu-avx512 on a CPU without AMX).
const DeviceClass& device_class_fallback(const DeviceClass& c);

// Makes this process run as `c`: caps oneDNN's ISA (must precede the first oneDNN primitive;
// calling it later with a different cap throws) and our kernels' ISA, and sets the OpenMP
// thread count. Throws if the class is unavailable here.
void device_class_activate(const DeviceClass& c, int threads);
// The class activated in this process, or nullptr.
const DeviceClass* device_class_active();

struct PrecisionCapability {
  Precision precision;
  SupportLevel level;
  std::string detail;
};
// For each GEMM precision (FP32, TF32, BF16, FP16, INT8, FP8_E4M3), how the active class
// computes it (cpu: asks the oneDNN backend for a forward-shaped GEMM). CPU classes must be the
// active one (the ISA cap is process-wide).
std::vector<PrecisionCapability> device_class_capabilities(const DeviceClass& c);

}  // namespace qsync
