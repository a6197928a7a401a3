// File: kernels/device_class.h
// Device classes: the named kinds of device a rank runs as. On the CPU a class caps the
// instruction set (oneDNN's max ISA and our own kernels) and the thread count, which gives
// real, different per-precision speeds on one machine: the project's stand-ins for the
// training and inference GPUs of a hybrid pool. GPU classes are named by product (gpu-t4,
// gpu-a10, gpu-l4, gpu-v100, gpu-a100, gpu-h100, gpu-h200), the names the planner and the
// operator use; each carries its compute capability, and what it runs natively follows from it
// and the precision table (kernels/precision.h: cuda_native_sm).
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
  std::string name;         // "cpu-amx", "cpu-avx512", "cpu-avx2", "gpu-t4", "gpu-h200", ...
  DeviceKind kind;
  CpuIsa cpu_isa_cap;       // CPU classes: the instruction-set cap
  int cuda_sm;              // GPU classes: compute capability major * 10 + minor (75, 80, 86, 89, 90)
  std::string description;
  // GPU classes: the product as CUDA and Kubernetes name it ("T4", "A10", "H200"); a device
  // matches when a word of its name is the product, optionally followed by one letter ("A10G").
  std::string gpu_product = {};
};

// The oldest compute capability the CUDA 13 toolkit compiles for (it dropped Volta, sm70).
inline constexpr int CUDA_MIN_SM = 75;

// Whether a CUDA device name ("NVIDIA A10G", "Tesla T4", "NVIDIA H100 80GB HBM3") or a
// Kubernetes product label ("NVIDIA-A100-SXM4-80GB") is the product of class `c`.
bool device_class_matches_gpu_product(const DeviceClass& c, std::string_view product);
// The GPU class of a product name or label, or nullptr for a product no class names.
const DeviceClass* device_class_for_gpu_product(std::string_view product);

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
// thread count. Throws if the class is unavailable here. A GPU class selects this rank's device:
// visible device LOCAL_RANK (0 when unset; CUDA_VISIBLE_DEVICES decides what is visible), which
// must be of the class's product; the error names what is there instead.
void device_class_activate(const DeviceClass& c, int threads);
// The class activated in this process, or nullptr.
const DeviceClass* device_class_active();
// The visible CUDA device a GPU class runs on (LOCAL_RANK, default 0): what activation selects.
int device_class_cuda_device_index();

struct PrecisionCapability {
  Precision precision;
  SupportLevel level;
  std::string detail;
};
// For each GEMM precision (FP32, TF32, BF16, FP16, INT8, FP8_E4M3), how the active class
// computes it (cpu: asks the oneDNN backend for a forward-shaped GEMM; TF32 is UNSUPPORTED on CPU
// classes, it is a GPU tensor-core mode). CPU classes must be the active one (the ISA cap is
// process-wide). GPU classes read the precision table: NATIVE from cuda_native_sm on, else
// UNSUPPORTED (a GPU class never emulates on the host); classes below CUDA_MIN_SM run nothing.
std::vector<PrecisionCapability> device_class_capabilities(const DeviceClass& c);

}  // namespace qsync
