// File: worker/device_report.cpp
// The device report and its GEMM benchmark (see device_report.h).
#include "worker/device_report.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/device_class.h"
#include "planner/atomic_file.h"
#include "planner/cli_args.h"
#include "planner/device_profile.h"
#include "worker/dist/collectives.h"
#if defined(QSYNC_WITH_CUDA)
#include <cuda_runtime.h>

#include "kernels/cuda/cublaslt_matmul.h"
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/cudnn_conv.h"
#include "kernels/cuda/elementwise_cuda.h"
#include "kernels/cuda/quantize_cuda.h"
#endif

namespace qsync {

const char* const DEVICES_USAGE =
    "usage: qsync-worker devices [--bench] [--size N (GEMM M = N = K, 8192)] [--iterations I (20)] [--json FILE]\n"
    "  The visible CUDA devices, their device classes and library versions; --bench times a GEMM per precision.\n";

DeviceReportConfig device_report_parse_args(int argc, char** argv) {
  DeviceReportConfig c;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--bench") {
      c.bench = true;
      continue;
    }
    if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value\n" + DEVICES_USAGE);
    const std::string v = argv[++i];
    if (a == "--size") c.size = parse_int_flag(a, v);
    else if (a == "--iterations") c.iterations = int(parse_int_flag(a, v));
    else if (a == "--json") c.json = v;
    else throw std::invalid_argument("devices: unknown argument '" + a + "'\n" + DEVICES_USAGE);
  }
  if (c.size < 16 || c.iterations < 1) throw std::invalid_argument("devices: --size >= 16 and --iterations >= 1\n");
  return c;
}

#if defined(QSYNC_WITH_CUDA)
namespace {

// TFLOP/s of an (n, n, n) GEMM with operands of precision p (median of `iterations` timed runs
// after 3 warm-ups, CUDA events around each), on random data; 0 with the error when it fails.
double gemm_tflops(Precision pa, Precision pb, int64_t n, int iterations, std::string& error) {
  try {
    cudaStream_t s = nullptr;
    QSYNC_CUDA_CHECK(cudaStreamCreate(&s));
    CudaBuffer xa(size_t(n * n) * 4), xb(size_t(n * n) * 4), c(size_t(n * n) * 4), scale(64);
    fill_uniform_cuda(xa.as<float>(), n * n, 1, s);
    fill_uniform_cuda(xb.as<float>(), n * n, 2, s);
    CudaBuffer qa(size_t(n * n) * 4), qb(size_t(n * n) * 4);
    const std::vector<float> one = {1.0f / 127, 1.0f / 127, 1.0f, 1.0f};
    scale.upload(one.data(), one.size() * sizeof(float));
    auto encode = [&](Precision p, const CudaBuffer& x, CudaBuffer& q, const float* sc) -> const void* {
      switch (p) {
        case Precision::BF16: convert_fp32_to_bf16_cuda(x.as<float>(), q.as<uint16_t>(), n * n, s); return q.data();
        case Precision::FP16: convert_fp32_to_fp16_cuda(x.as<float>(), q.as<uint16_t>(), n * n, s); return q.data();
        case Precision::INT8:
          quantize_int8_cuda(x.as<float>(), q.as<int8_t>(), n * n, sc, Rounding::NEAREST_EVEN, 0, s);
          return q.data();
        case Precision::FP8_E4M3: convert_fp32_to_e4m3_cuda(x.as<float>(), q.as<uint8_t>(), n * n, sc, s); return q.data();
        case Precision::FP8_E5M2: convert_fp32_to_e5m2_cuda(x.as<float>(), q.as<uint8_t>(), n * n, sc, s); return q.data();
        default: return x.data();
      }
    };
    // INT8 spreads [-1, 1) over [-127, 127] (scale 1/127); FP8 encodes it unscaled.
    const float* sa = pa == Precision::INT8 ? scale.as<float>() : scale.as<float>() + 2;
    const float* sb = pb == Precision::INT8 ? scale.as<float>() : scale.as<float>() + 2;
    const bool quantized = precision_takes_scales(pa);
    const void* a = encode(pa, xa, qa, sa);
    const void* b = encode(pb, xb, qb, sb);
    CudaMatmul mm;
    mm.gemm.m = mm.gemm.n = mm.gemm.k = n;
    const ScaleMode mode = quantized ? ScaleMode::PER_TENSOR : ScaleMode::NONE;
    mm.gemm.a = {a, pa, Transpose::NO, 0, mode, quantized ? sa : nullptr};
    mm.gemm.b = {b, pb, Transpose::YES, 0, mode, quantized ? sb : nullptr};  // TN: the forward layout
    mm.gemm.c = c.as<float>();
    CudaMatmulEngine engine(s);
    for (int i = 0; i < 3; ++i) engine.run(mm);
    std::vector<float> ms;
    cudaEvent_t e0 = nullptr, e1 = nullptr;
    QSYNC_CUDA_CHECK(cudaEventCreate(&e0));
    QSYNC_CUDA_CHECK(cudaEventCreate(&e1));
    for (int i = 0; i < iterations; ++i) {
      QSYNC_CUDA_CHECK(cudaEventRecord(e0, s));
      engine.run(mm);
      QSYNC_CUDA_CHECK(cudaEventRecord(e1, s));
      QSYNC_CUDA_CHECK(cudaEventSynchronize(e1));
      float t = 0;
      QSYNC_CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
      ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    (void)cudaEventDestroy(e0);
    (void)cudaEventDestroy(e1);
    QSYNC_CUDA_CHECK(cudaStreamSynchronize(s));
    (void)cudaStreamDestroy(s);
    return 2.0 * double(n) * double(n) * double(n) / (double(ms[ms.size() / 2]) * 1e-3) / 1e12;
  } catch (const std::exception& e) {
    error = e.what();
    return 0.0;
  }
}

}  // namespace
#endif

std::string device_report_run(const DeviceReportConfig& c) {
  nlohmann::json j;
  j["nccl"] = nccl_version_text();
#if defined(QSYNC_WITH_CUDA)
  j["cuda_build"] = true;
  j["cuda"] = cuda_version_text();
  j["cublaslt"] = cublaslt_version_text();
  j["devices"] = nlohmann::json::array();
  std::printf("%s; %s; %s\n", cuda_version_text().c_str(), cublaslt_version_text().c_str(), nccl_version_text().c_str());
  const int count = cuda_device_count();
  if (count > 0) {
    cuda_set_device(0);
    j["cudnn"] = cudnn_version_text();
    std::printf("%s\n", cudnn_version_text().c_str());
  }
  std::printf("%d visible CUDA device%s (LOCAL_RANK picks one for a GPU class)\n", count, count == 1 ? "" : "s");
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp prop{};
    QSYNC_CUDA_CHECK(cudaGetDeviceProperties(&prop, d));
    const DeviceClass* cls = device_class_for_gpu_product(prop.name);
    nlohmann::json dev = {{"index", d}, {"name", prop.name}, {"sm", cuda_device_sm(d)},
                          {"sms", prop.multiProcessorCount}, {"memory_bytes", int64_t(prop.totalGlobalMem)},
                          {"class", cls ? cls->name : ""}};
    std::printf("  cuda:%d  %s  sm%d, %d SMs, %.1f GiB  class %s\n", d, prop.name, cuda_device_sm(d),
                prop.multiProcessorCount, double(prop.totalGlobalMem) / double(1 << 30),
                cls ? cls->name.c_str() : "(none: no class names this product)");
    if (c.bench && cls != nullptr) {
      cuda_set_device(d);
      nlohmann::json bench = nlohmann::json::array();
      const std::pair<Precision, Precision> cases[] = {
          {Precision::FP32, Precision::FP32}, {Precision::TF32, Precision::TF32}, {Precision::BF16, Precision::BF16},
          {Precision::FP16, Precision::FP16}, {Precision::INT8, Precision::INT8},
          {Precision::FP8_E4M3, Precision::FP8_E4M3}, {Precision::FP8_E5M2, Precision::FP8_E4M3}};
      for (const auto& [pa, pb] : cases) {
        if (cls->cuda_sm < std::max(precision_traits(pa).cuda_native_sm, precision_traits(pb).cuda_native_sm)) continue;
        std::string error;
        const double tflops = gemm_tflops(pa, pb, c.size, c.iterations, error);
        const double peak = gpu_datasheet_peak_tflops(cls->name, pa);
        const std::string label = pa == pb ? precision_name(pa) : std::string(precision_name(pa)) + "x" + precision_name(pb);
        std::printf("    gemm %-17s %lld^3: %8.1f TFLOP/s  (datasheet dense peak %.0f: %.0f%%)%s%s\n", label.c_str(),
                    (long long)c.size, tflops, peak, peak > 0 ? 100.0 * tflops / peak : 0.0, error.empty() ? "" : "  ",
                    error.c_str());
        bench.push_back({{"precision", label}, {"tflops", tflops}, {"peak_tflops", peak}, {"error", error}});
      }
      dev["gemm"] = bench;
    }
    j["devices"].push_back(dev);
  }
#else
  j["cuda_build"] = false;
  std::printf("this build has no CUDA (configure with -DQSYNC_ENABLE_CUDA=ON); %s\n", nccl_version_text().c_str());
#endif
  const std::string text = j.dump(2) + "\n";
  if (!c.json.empty()) atomic_file_write(c.json, text);
  return text;
}

}  // namespace qsync
