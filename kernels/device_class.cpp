// File: kernels/device_class.cpp
// The device-class table, availability on this machine, activation (ISA cap + threads), and the
// per-precision capability report.
#include "kernels/device_class.h"

#include <omp.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
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
    {"cpu-avx512-bf16", DeviceKind::CPU, CpuIsa::AVX512_BF16, 0,
     "CPU capped at AVX-512 with BF16 dot products (Cooper Lake, Zen 4 and later; no AMX): BF16 GEMMs and the "
     "16-bit backward of int8 layers run natively"},
    {"cpu-avx512", DeviceKind::CPU, CpuIsa::AVX512, 0,
     "CPU capped at AVX-512 VNNI (INT8 dot products, BF16 emulated)"},
    {"cpu-avx2", DeviceKind::CPU, CpuIsa::AVX2, 0,
     "CPU capped at AVX2 (FMA; INT8 through 16-bit pair sums, no VNNI, no BF16): the training-GPU stand-in "
     "of a pool that must run on every x86-64 CPU"},
    {"cpu-sse41", DeviceKind::CPU, CpuIsa::SCALAR, 0,
     "oneDNN capped at SSE4.1 (128-bit, no FMA): an older inference device; its FP32 GEMMs run at about a "
     "third of cpu-avx2's and its INT8 GEMMs at about three times its own FP32, as a T4's tensor cores "
     "outrun its FP32 units; the engine's own loops are the same on every class"},
    // GPU classes, by product; what each runs natively: the precision table's cuda_native_sm.
    {"gpu-t4", DeviceKind::CUDA, CpuIsa::SCALAR, 75, "NVIDIA T4 (Turing, sm75): FP16 and INT8 tensor cores", "T4"},
    {"gpu-a10", DeviceKind::CUDA, CpuIsa::SCALAR, 86, "NVIDIA A10 / A10G (Ampere, sm86): + TF32, BF16", "A10"},
    {"gpu-l4", DeviceKind::CUDA, CpuIsa::SCALAR, 89, "NVIDIA L4 (Ada, sm89): + FP8", "L4"},
    {"gpu-v100", DeviceKind::CUDA, CpuIsa::SCALAR, 70,
     "NVIDIA V100 (Volta, sm70): FP16 tensor cores; CUDA 13 cannot compile for sm70", "V100"},
    {"gpu-a100", DeviceKind::CUDA, CpuIsa::SCALAR, 80, "NVIDIA A100 (Ampere, sm80): TF32, BF16, FP16, INT8", "A100"},
    {"gpu-h100", DeviceKind::CUDA, CpuIsa::SCALAR, 90, "NVIDIA H100 (Hopper, sm90): + FP8", "H100"},
    {"gpu-h200", DeviceKind::CUDA, CpuIsa::SCALAR, 90, "NVIDIA H200 (Hopper, sm90, 141 GB): + FP8", "H200"},
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

int local_rank_device() {
  const char* v = std::getenv("LOCAL_RANK");
  if (v == nullptr || *v == '\0') return 0;
  char* end = nullptr;
  const long r = std::strtol(v, &end, 10);
  if (*end != '\0' || r < 0 || r > 1024)
    throw std::invalid_argument(std::string("LOCAL_RANK='") + v + "' is not a device index: unset it or set 0, 1, ...");
  return int(r);
}

[[maybe_unused]] std::string visible_devices_note() {  // used by CUDA builds only
  const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
  return v == nullptr ? "CUDA_VISIBLE_DEVICES unset" : std::string("CUDA_VISIBLE_DEVICES=") + v;
}

std::string sm_text(int sm) { return "sm" + std::to_string(sm); }

// (Constants, not literals: GCC 12 misreports inlined long-literal copies as -Warray-bounds.)
const std::string TF32_ON_CPU = "tf32 is the TF32 tensor-core mode of GPUs (sm80+); CPU classes compute fp32";
const std::string CUDA_CORES = "cuBLASLt on the CUDA cores";

}  // namespace

bool device_class_matches_gpu_product(const DeviceClass& c, std::string_view product) {
  if (c.kind != DeviceKind::CUDA || c.gpu_product.empty()) return false;
  auto upper = [](char ch) { return char(std::toupper(static_cast<unsigned char>(ch))); };
  size_t i = 0;
  while (i < product.size()) {
    while (i < product.size() && (product[i] == ' ' || product[i] == '-' || product[i] == '_')) ++i;
    size_t j = i;
    while (j < product.size() && product[j] != ' ' && product[j] != '-' && product[j] != '_') ++j;
    const std::string_view word = product.substr(i, j - i);
    if (word.size() >= c.gpu_product.size()) {
      bool same = true;
      for (size_t k = 0; k < c.gpu_product.size() && same; ++k) same = upper(word[k]) == upper(c.gpu_product[k]);
      const size_t rest = word.size() - c.gpu_product.size();
      if (same && (rest == 0 || (rest == 1 && std::isalpha(static_cast<unsigned char>(word.back()))))) return true;
    }
    i = j;
  }
  return false;
}

const DeviceClass* device_class_for_gpu_product(std::string_view product) {
  for (const DeviceClass& c : CLASSES)
    if (device_class_matches_gpu_product(c, product)) return &c;
  return nullptr;
}

int device_class_cuda_device_index() { return local_rank_device(); }

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
  if (c.cuda_sm < CUDA_MIN_SM)
    return {false, c.name + " (" + sm_text(c.cuda_sm) + "): CUDA 13 cannot compile for compute capability " +
                       std::to_string(c.cuda_sm / 10) + "." + std::to_string(c.cuda_sm % 10) +
                       " (it supports sm" + std::to_string(CUDA_MIN_SM) + " and newer): use another class for these GPUs"};
#if defined(QSYNC_WITH_CUDA)
  const int count = cuda_device_count();
  const int index = local_rank_device();
  if (count == 0)
    return {false, c.name + ": no CUDA device is visible to this process (" + visible_devices_note() +
                       "): run it on a node with an " + c.gpu_product + ", or as a CPU class"};
  if (index >= count)
    return {false, c.name + ": LOCAL_RANK " + std::to_string(index) + " asks for CUDA device " + std::to_string(index) +
                       " but only " + std::to_string(count) + " are visible (" + visible_devices_note() + ")"};
  const std::string name = cuda_device_name(index);
  const int sm = cuda_device_sm(index);
  if (sm == c.cuda_sm && device_class_matches_gpu_product(c, name)) return {true, ""};
  return {false, c.name + " needs an NVIDIA " + c.gpu_product + " (" + sm_text(c.cuda_sm) + "), but CUDA device " +
                     std::to_string(index) + " (LOCAL_RANK " + std::to_string(index) + ", " + visible_devices_note() +
                     ") is an " + name + " (" + sm_text(sm) + ")" +
                     (device_class_for_gpu_product(name) ? ": run it as " + device_class_for_gpu_product(name)->name
                                                         : std::string())};
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
      // Our own vectorized loops (quantize, convert) are the same on every class: at least the
      // host baseline's AVX2. Below it only oneDNN is capped (cpu-sse41: an older device's GEMMs
      // and convolutions, not a scalar engine).
      cpu_isa_set_cap(std::max(c.cpu_isa_cap, CpuIsa::AVX2));
    }
    omp_set_num_threads(threads);
  } else {
    if (active_class != nullptr && active_class != &c)
      throw std::logic_error("this process already runs as " + active_class->name + "; start another process to run as " + c.name);
#if defined(QSYNC_WITH_CUDA)
    cuda_set_device(local_rank_device());
#endif
    omp_set_num_threads(threads);  // the host side of a GPU rank: data, casts of host copies
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
      const int need = precision_traits(p).cuda_native_sm;
      PrecisionCapability cap;
      cap.precision = p;
      cap.level = c.cuda_sm >= CUDA_MIN_SM && c.cuda_sm >= need ? SupportLevel::NATIVE : SupportLevel::UNSUPPORTED;
      if (c.cuda_sm < CUDA_MIN_SM) cap.detail = c.name + ": CUDA 13 cannot compile for " + sm_text(c.cuda_sm);
      else if (cap.level == SupportLevel::NATIVE)
        cap.detail = need == 0 ? CUDA_CORES : "cuBLASLt on tensor cores (" + sm_text(need) + "+)";
      else
        cap.detail = std::string(precision_name(p)) + " needs " + sm_text(need) + "+ tensor cores; " + c.name + " is " +
                     sm_text(c.cuda_sm);
      out.push_back(std::move(cap));
    }
    return out;
  }
  const DeviceClass* active = device_class_active();
  if (active != nullptr && active != &c)
    throw std::logic_error("capabilities of " + c.name + " can only be read in a process running as it (this one runs as " + active->name + ")");
  const GemmBackend& cpu = gemm_backend_by_name("cpu");
  for (Precision p : gemm_precisions) {
    if (p == Precision::TF32) {
      PrecisionCapability cap;
      cap.precision = p;
      cap.level = SupportLevel::UNSUPPORTED;
      cap.detail = TF32_ON_CPU;
      out.push_back(std::move(cap));
      continue;
    }
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
