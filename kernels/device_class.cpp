// File: kernels/device_class.cpp
// The device-class table, availability on this machine, activation (ISA cap + threads), and the
// per-precision capability report.
#include "kernels/device_class.h"

#include <omp.h>

#include <mutex>
#include <stdexcept>

#include <dnnl.hpp>

#include "kernels/gemm_registry.h"
#if defined(QSYNC_WITH_CUDA)
#include "kernels/cuda/cuda_device.h"
#endif

namespace qsync {
namespace {

const std::vector<DeviceClass> CLASSES = {
    {"cpu-amx", DeviceKind::CPU, CpuIsa::AMX, 0,
     "CPU with AMX tiles (INT8/BF16 matrix units): the training-GPU stand-in"},
    {"cpu-avx512", DeviceKind::CPU, CpuIsa::AVX512, 0,
     "CPU capped at AVX-512 VNNI (INT8 dot products, BF16 emulated)"},
    {"cpu-avx2", DeviceKind::CPU, CpuIsa::AVX2, 0,
     "CPU capped at AVX2 (FMA; INT8 through 16-bit pair sums, no VNNI, no BF16): the training-GPU stand-in "
     "of a pool that must run on every x86-64 CPU"},
    {"cpu-sse41", DeviceKind::CPU, CpuIsa::SCALAR, 0,
     "oneDNN capped at SSE4.1 (128-bit, no FMA): an older inference device; its FP32 GEMMs run at about a "
     "third of cpu-avx2's and its INT8 GEMMs at about three times its own FP32, as a T4's tensor cores "
     "outrun its FP32 units; the engine's own loops are the same on every class"},
    {"cuda-sm75", DeviceKind::CUDA, CpuIsa::SCALAR, 75, "Turing (T4): FP16 and INT8 tensor cores"},
    {"cuda-sm80", DeviceKind::CUDA, CpuIsa::SCALAR, 80, "Ampere (A100, A10): + BF16, TF32"},
    {"cuda-sm89", DeviceKind::CUDA, CpuIsa::SCALAR, 89, "Ada (L4, L40): + FP8"},
    {"cuda-sm90", DeviceKind::CUDA, CpuIsa::SCALAR, 90, "Hopper (H100, H200): + FP8"},
};

dnnl::cpu_isa onednn_isa_for(CpuIsa cap) {
  switch (cap) {
    case CpuIsa::SCALAR: return dnnl::cpu_isa::sse41;
    case CpuIsa::AVX2: return dnnl::cpu_isa::avx2;
    case CpuIsa::AVX512: return dnnl::cpu_isa::avx512_core_vnni;
    case CpuIsa::AVX512_BF16: return dnnl::cpu_isa::avx512_core_bf16;
    case CpuIsa::AMX: return dnnl::cpu_isa::all;
  }
  return dnnl::cpu_isa::all;
}

std::mutex active_mutex;
const DeviceClass* active_class = nullptr;

#if defined(QSYNC_WITH_CUDA)
int cuda_sm_present(int sm) {
  for (int d = 0; d < cuda_device_count(); ++d)
    if (cuda_device_sm(d) == sm) return d;
  return -1;
}
#endif

}  // namespace

const std::vector<DeviceClass>& device_classes() { return CLASSES; }

const DeviceClass& device_class_by_name(std::string_view name) {
  std::string known;
  for (const DeviceClass& c : CLASSES) {
    if (name == c.name) return c;
    known += known.empty() ? "" : ", ";
    known += c.name;
  }
  throw std::invalid_argument("unknown device class '" + std::string(name) + "'; known classes: " + known);
}

DeviceAvailability device_class_availability(const DeviceClass& c) {
  if (c.kind == DeviceKind::CPU) {
    const CpuIsa have = cpu_isa_detected();
    if (have >= c.cpu_isa_cap) return {true, ""};
    return {false, c.name + " needs " + cpu_isa_name(c.cpu_isa_cap) + " but this CPU offers " + cpu_isa_name(have) +
                       "; the closest class here is " + device_class_fallback(c).name};
  }
#if defined(QSYNC_WITH_CUDA)
  if (cuda_sm_present(c.cuda_sm) >= 0) return {true, ""};
  return {false, c.name + ": no CUDA device of compute capability " + std::to_string(c.cuda_sm / 10) + "." +
                     std::to_string(c.cuda_sm % 10) + " here (" + std::to_string(cuda_device_count()) + " CUDA devices)"};
#else
  return {false, c.name + ": this build has no CUDA (configure with -DQSYNC_ENABLE_CUDA=ON)"};
#endif
}

const DeviceClass& device_class_fallback(const DeviceClass& c) {
  if (c.kind == DeviceKind::CPU && cpu_isa_detected() >= c.cpu_isa_cap) return c;
  const DeviceClass* best = nullptr;
  for (const DeviceClass& o : CLASSES)
    if (o.kind == DeviceKind::CPU && o.cpu_isa_cap <= cpu_isa_detected() &&
        (c.kind != DeviceKind::CPU || o.cpu_isa_cap <= c.cpu_isa_cap) &&
        (best == nullptr || o.cpu_isa_cap > best->cpu_isa_cap))
      best = &o;
  if (best == nullptr) throw std::runtime_error("no CPU device class runs on this CPU (it lacks AVX2)");
  return *best;
}

void device_class_activate(const DeviceClass& c, int threads) {
  if (threads < 1) throw std::invalid_argument("device class " + c.name + ": threads must be >= 1, got " + std::to_string(threads));
  const DeviceAvailability av = device_class_availability(c);
  if (!av.available) throw std::runtime_error("cannot run as " + av.note);
  std::lock_guard<std::mutex> lock(active_mutex);
  if (c.kind == DeviceKind::CPU) {
    if (active_class != nullptr && active_class != &c)
      throw std::logic_error("this process already runs as " + active_class->name + "; the ISA cap is process-wide, start another process to run as " + c.name);
    if (active_class == nullptr) {
      // On a CPU without AMX, "all" and the avx512_core_bf16 cap coincide: no cap is needed.
      if (dnnl::set_max_cpu_isa(onednn_isa_for(c.cpu_isa_cap)) != dnnl::status::success)
        throw std::logic_error("could not cap oneDNN at " + std::string(cpu_isa_name(c.cpu_isa_cap)) +
                               ": oneDNN already generated kernels; activate the device class before the first GEMM");
      cpu_isa_set_cap(c.cpu_isa_cap);
    }
    omp_set_num_threads(threads);
  }
  active_class = &c;
}

const DeviceClass* device_class_active() {
  std::lock_guard<std::mutex> lock(active_mutex);
  return active_class;
}

std::vector<PrecisionCapability> device_class_capabilities(const DeviceClass& c) {
  const Precision gemm_precisions[] = {Precision::FP32, Precision::TF32, Precision::BF16,
                                       Precision::FP16, Precision::INT8, Precision::FP8_E4M3};
  std::vector<PrecisionCapability> out;
  if (c.kind == DeviceKind::CUDA) {
    for (Precision p : gemm_precisions) {
      SupportLevel level = SupportLevel::NATIVE;
      std::string detail = "cuBLASLt";
      if ((p == Precision::TF32 || p == Precision::BF16) && c.cuda_sm < 80) level = SupportLevel::UNSUPPORTED, detail = "needs sm80+";
      if (p == Precision::FP8_E4M3 && c.cuda_sm < 89) level = SupportLevel::EMULATED, detail = "fp8 tensor cores need sm89+; decoded to fp16";
      out.push_back({p, level, detail});
    }
    return out;
  }
  const DeviceClass* active = device_class_active();
  if (active != nullptr && active != &c)
    throw std::logic_error("capabilities of " + c.name + " can only be read in a process running as it (this one runs as " + active->name + ")");
  const GemmBackend& cpu = gemm_backend_by_name("cpu");
  for (Precision p : gemm_precisions) {
    GemmSignature s;
    s.a_precision = s.b_precision = p;
    s.m = s.n = s.k = 128;
    s.b_trans = Transpose::YES;
    const GemmSupport sup = cpu.supports(s);
    out.push_back({p, sup.level, sup.detail});
  }
  return out;
}

}  // namespace qsync
