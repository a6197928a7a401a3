// Unit tests for kernels/device_class.h: the class table, availability and fallback on this CPU,
// and activation capping the ISA (each activation runs in a forked child: the cap is per process).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <functional>

#include "kernels/cpu/gemm_onednn.h"
#include "kernels/device_class.h"

namespace qsync {
namespace {

// Runs `body` in a child process; returns its exit code (gtest failures inside -> 1).
int run_in_child(const std::function<bool()>& body) {
  const pid_t pid = fork();
  if (pid == 0) _exit(body() ? 0 : 1);
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

TEST(DeviceClass, TableHasTheNamedClasses) {
  for (const char* n : {"cpu-amx", "cpu-avx512-bf16", "cpu-avx512", "cpu-avx2", "gpu-t4", "gpu-a10", "gpu-l4", "gpu-v100", "gpu-a100",
                        "gpu-h100", "gpu-h200"})
    EXPECT_EQ(device_class_by_name(n).name, n);
  try {
    device_class_by_name("tpu-v5");
    ADD_FAILURE() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("cpu-avx2"), std::string::npos) << e.what();
  }
}

TEST(DeviceClass, AvailabilityFollowsTheCpuAndFallsBack) {
  const CpuIsa have = cpu_isa_detected();
  for (const DeviceClass& c : device_classes()) {
    if (c.kind != DeviceKind::CPU) continue;
    const DeviceAvailability av = device_class_availability(c);
    EXPECT_EQ(av.available, have >= c.cpu_isa_cap) << c.name;
    const DeviceClass& fb = device_class_fallback(c);
    EXPECT_TRUE(device_class_availability(fb).available) << fb.name;
    EXPECT_LE(fb.cpu_isa_cap, c.cpu_isa_cap);
    if (!av.available) {
      EXPECT_NE(av.note.find(fb.name), std::string::npos) << av.note;
    }
  }
}

TEST(DeviceClass, CudaClassesAreUnavailableWithoutADevice) {
  const DeviceAvailability av = device_class_availability(device_class_by_name("gpu-a100"));
  if (av.available) GTEST_SKIP() << "an A100 is present";
  EXPECT_NE(av.note.find("gpu-a100"), std::string::npos);
}

// One naming: GPU classes by product, each with its compute capability; products as CUDA and
// Kubernetes spell them map to their class (a suffix letter allowed, other digits not).
TEST(DeviceClass, GpuClassesNameProductsWithTheirComputeCapability) {
  const std::pair<const char*, int> sm[] = {{"gpu-t4", 75}, {"gpu-a10", 86}, {"gpu-l4", 89}, {"gpu-v100", 70},
                                            {"gpu-a100", 80}, {"gpu-h100", 90}, {"gpu-h200", 90}};
  for (const auto& [name, cc] : sm) {
    EXPECT_EQ(device_class_by_name(name).kind, DeviceKind::CUDA) << name;
    EXPECT_EQ(device_class_by_name(name).cuda_sm, cc) << name;
  }
  const std::pair<const char*, const char*> products[] = {
      {"Tesla T4", "gpu-t4"},          {"NVIDIA A10G", "gpu-a10"},    {"NVIDIA-A10", "gpu-a10"},
      {"NVIDIA L4", "gpu-l4"},         {"NVIDIA A100-SXM4-80GB", "gpu-a100"}, {"nvidia-h100-80gb-hbm3", "gpu-h100"},
      {"NVIDIA H200", "gpu-h200"},     {"Tesla-V100-SXM2-16GB", "gpu-v100"}};
  for (const auto& [product, name] : products) {
    const DeviceClass* c = device_class_for_gpu_product(product);
    ASSERT_NE(c, nullptr) << product;
    EXPECT_EQ(c->name, name) << product;
  }
  EXPECT_EQ(device_class_for_gpu_product("NVIDIA L40S"), nullptr);  // not the L4
  EXPECT_FALSE(device_class_matches_gpu_product(device_class_by_name("gpu-a10"), "NVIDIA A100-SXM4-80GB"));
}

// What a GPU class runs natively is the precision table's cuda_native_sm against its compute
// capability; a class CUDA 13 cannot compile for runs nothing; a GPU class never emulates.
TEST(DeviceClass, GpuCapabilitiesFollowThePrecisionTable) {
  auto level = [](const char* cls, Precision p) {
    for (const PrecisionCapability& c : device_class_capabilities(device_class_by_name(cls)))
      if (c.precision == p) return c.level;
    return SupportLevel::UNSUPPORTED;
  };
  EXPECT_EQ(level("gpu-t4", Precision::FP16), SupportLevel::NATIVE);
  EXPECT_EQ(level("gpu-t4", Precision::INT8), SupportLevel::NATIVE);
  EXPECT_EQ(level("gpu-t4", Precision::BF16), SupportLevel::UNSUPPORTED);
  EXPECT_EQ(level("gpu-t4", Precision::TF32), SupportLevel::UNSUPPORTED);
  EXPECT_EQ(level("gpu-a10", Precision::TF32), SupportLevel::NATIVE);
  EXPECT_EQ(level("gpu-a100", Precision::FP8_E4M3), SupportLevel::UNSUPPORTED);
  EXPECT_EQ(level("gpu-l4", Precision::FP8_E4M3), SupportLevel::NATIVE);
  EXPECT_EQ(level("gpu-h200", Precision::FP8_E4M3), SupportLevel::NATIVE);
  EXPECT_EQ(level("gpu-v100", Precision::FP32), SupportLevel::UNSUPPORTED);
  for (const DeviceClass& c : device_classes()) {
    if (c.kind != DeviceKind::CUDA) continue;
    for (const PrecisionCapability& p : device_class_capabilities(c))
      EXPECT_NE(p.level, SupportLevel::EMULATED) << c.name << " " << precision_name(p.precision);
  }
}

TEST(DeviceClass, ActivationCapsOnednnAndOurKernels) {
  for (const DeviceClass& c : device_classes()) {
    if (c.kind != DeviceKind::CPU || !device_class_availability(c).available) continue;
    SCOPED_TRACE(c.name);
    const int rc = run_in_child([&c] {
      device_class_activate(c, 1);
      // Our own loops never drop below the AVX2 baseline; below it only oneDNN is capped.
      if (cpu_isa_active() != std::min(std::max(c.cpu_isa_cap, CpuIsa::AVX2), cpu_isa_detected())) return false;
      const std::string int8_impl = onednn_matmul_impl(Precision::INT8);
      // Capped at AVX2 no AVX-512 kernel may appear; every class has a JIT INT8 kernel.
      if (int8_impl.empty() || int8_impl.rfind("ref", 0) == 0) return false;
      if (c.cpu_isa_cap == CpuIsa::AVX2 && int8_impl.find("avx512") != std::string::npos) return false;
      for (const PrecisionCapability& p : device_class_capabilities(c)) {
        if (p.precision == Precision::FP32 && p.level != SupportLevel::NATIVE) return false;
        if (p.precision == Precision::BF16 && c.cpu_isa_cap == CpuIsa::AVX2 && p.level == SupportLevel::NATIVE) return false;
      }
      return true;
    });
    EXPECT_EQ(rc, 0);
  }
}

TEST(DeviceClass, SecondClassInOneProcessIsRefused) {
  const int rc = run_in_child([] {
    device_class_activate(device_class_by_name("cpu-avx2"), 1);
    try {
      device_class_activate(device_class_fallback(device_class_by_name("cpu-amx")), 1);
    } catch (const std::logic_error& e) {
      return std::string(e.what()).find("process-wide") != std::string::npos;
    }
    return device_class_fallback(device_class_by_name("cpu-amx")).name == "cpu-avx2";
  });
  EXPECT_EQ(rc, 0);
}

}  // namespace
}  // namespace qsync
