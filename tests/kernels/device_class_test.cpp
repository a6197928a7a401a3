// Unit tests for kernels/device_class.h: the class table, availability and fallback on this CPU,
// and activation capping the ISA (each activation runs in a forked child: the cap is per process).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

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
  for (const char* n : {"cpu-amx", "cpu-avx512", "cpu-avx2", "cuda-sm75", "cuda-sm80", "cuda-sm90"})
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
  const DeviceAvailability av = device_class_availability(device_class_by_name("cuda-sm80"));
  if (av.available) GTEST_SKIP() << "a CUDA sm80 device is present";
  EXPECT_NE(av.note.find("cuda-sm80"), std::string::npos);
}

TEST(DeviceClass, ActivationCapsOnednnAndOurKernels) {
  for (const DeviceClass& c : device_classes()) {
    if (c.kind != DeviceKind::CPU || !device_class_availability(c).available) continue;
    SCOPED_TRACE(c.name);
    const int rc = run_in_child([&c] {
      device_class_activate(c, 1);
      if (cpu_isa_active() != std::min(c.cpu_isa_cap, cpu_isa_detected())) return false;
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
