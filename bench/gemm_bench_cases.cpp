// File: bench/gemm_bench_cases.cpp
// Measurements of the GEMM benchmark. Operands are generated once per shape and encoded in the
// precision under test, so only the GEMM is timed (the quantize rows time the rest).
#include "bench/gemm_bench_cases.h"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <random>

#include "kernels/cpu/gemm_onednn.h"
#include "kernels/gemm_registry.h"
#include "kernels/precision.h"
#include "kernels/quantize.h"

namespace qsync::bench {
namespace {

double median_seconds(int reps, const std::function<void()>& body) {
  body();  // warm-up: primitive creation, page faults
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    body();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// An operand encoded in precision p (INT8: symmetric per tensor; FP8: scale 1, values ~N(0,1)).
struct Encoded {
  std::vector<uint8_t> bytes;
  float scale = 1.0f;
};
// A operands (activations) of INT8 GEMMs use the class's activation range (7 bits without VNNI).
Encoded encode(const std::vector<float>& x, Precision p, bool a_operand) {
  const PrecisionTraits& t = precision_traits(p);
  Encoded e;
  e.bytes.resize(x.size() * size_t(t.bytes));
  if (p == Precision::INT8) {
    const int qmax = a_operand ? cpu_int8_activation_max() : 127;
    e.scale = int8_scale_from_amax(amax(x.data(), int64_t(x.size())), qmax);
    quantize_int8(x.data(), reinterpret_cast<int8_t*>(e.bytes.data()), int64_t(x.size()), e.scale,
                  Rounding::NEAREST_EVEN, 0);
    return e;
  }
  for (size_t i = 0; i < x.size(); ++i) {
    const uint32_t b = t.encode(x[i]);
    std::memcpy(&e.bytes[i * size_t(t.bytes)], &b, size_t(t.bytes));
  }
  return e;
}

struct OpCase {
  const char* name;
  Transpose ta, tb;
  long m, n, k;
};
std::vector<OpCase> op_cases(const LayerShape& l) {
  return {
      {"forward", Transpose::NO, Transpose::YES, l.batch, l.out, l.in},     // y = x w^T
      {"input_grad", Transpose::NO, Transpose::NO, l.batch, l.in, l.out},   // dx = dy w
      {"weight_grad", Transpose::YES, Transpose::NO, l.out, l.in, l.batch}, // dw = dy^T x
  };
}

}  // namespace

const std::vector<LayerShape>& bench_layers(bool quick) {
  static const std::vector<LayerShape> full = {
      {"square", 1024, 1024, 1024},  // 1024^3, the headline figure
      {"mlp", 128, 1024, 1024},      // 128 x 1024 x 1024 forward
      {"wide", 512, 1024, 4096},     // 512 x 4096 x 1024 forward
      {"conv", 6272, 576, 128},      // conv 3x3 64->128 on 14x14, batch 32, as GEMM
      {"gpt-fc1", 2048, 128, 512},   // the char-GPT's FFN up-projection: batch 32 x 64 tokens
      {"gpt-fc2", 2048, 512, 128},   // and its down-projection
  };
  static const std::vector<LayerShape> small = {{"square", 256, 256, 256}, {"mlp", 64, 256, 256}};
  return quick ? small : full;
}

std::vector<GemmRow> bench_run_class(const std::string& device_class, int reps, bool quick) {
  const GemmBackend& cpu = gemm_backend_by_name("cpu");
  std::vector<GemmRow> rows;
  const Precision precisions[] = {Precision::FP32, Precision::BF16, Precision::FP16, Precision::INT8,
                                  Precision::FP8_E4M3};
  for (const LayerShape& l : bench_layers(quick)) {
    for (const OpCase& oc : op_cases(l)) {
      const bool a_t = oc.ta == Transpose::YES, b_t = oc.tb == Transpose::YES;
      const auto a32 = random_floats(size_t(oc.m * oc.k), 1), b32 = random_floats(size_t(oc.k * oc.n), 2);
      std::vector<float> c(size_t(oc.m * oc.n));
      for (Precision p : precisions) {
        const Encoded a = encode(a32, p, true), b = encode(b32, p, false);
        const bool scaled = p == Precision::INT8 || p == Precision::FP8_E4M3;
        GemmDesc d;
        d.m = oc.m, d.n = oc.n, d.k = oc.k;
        d.a = {a.bytes.data(), p, oc.ta, a_t ? oc.m : oc.k, scaled ? ScaleMode::PER_TENSOR : ScaleMode::NONE,
               scaled ? &a.scale : nullptr};
        d.b = {b.bytes.data(), p, oc.tb, b_t ? oc.k : oc.n, scaled ? ScaleMode::PER_TENSOR : ScaleMode::NONE,
               scaled ? &b.scale : nullptr};
        d.c = c.data();
        const GemmSupport sup = cpu.supports(gemm_signature(d));
        if (!sup.ok()) continue;
        const double s = median_seconds(reps, [&] { cpu.gemm(d); });
        rows.push_back({device_class, precision_name(p), oc.name, l.name, oc.m, oc.n, oc.k, s,
                        gemm_flops(oc.m, oc.n, oc.k) / s * 1e-9, support_level_name(sup.level), sup.detail});
      }
    }
    // INT8 quantize + dequantize overhead of the forward GEMM: amax and quantize of x (per
    // tensor) and w (per output channel); dequantization is fused into the GEMM's output scales.
    if (l.name == "square" || quick) {
      const auto x = random_floats(size_t(l.batch * l.in), 3), w = random_floats(size_t(l.out * l.in), 4);
      std::vector<int8_t> xq(x.size()), wq(w.size());
      std::vector<float> w_scales(size_t(l.out));
      const double s = median_seconds(reps, [&] {
        const float xs = int8_scale_from_amax(amax(x.data(), int64_t(x.size())), cpu_int8_activation_max());
        quantize_int8(x.data(), xq.data(), int64_t(x.size()), xs, Rounding::NEAREST_EVEN, 0);
        amax_rows(w.data(), l.out, l.in, w_scales.data());
        for (auto& v : w_scales) v = int8_scale_from_amax(v);
        quantize_int8_rows(w.data(), wq.data(), l.out, l.in, w_scales.data(), Rounding::NEAREST_EVEN, 0);
      });
      rows.push_back({device_class, "int8", "quantize", l.name, l.batch, l.out, l.in, s, 0, "native",
                      "amax + quantize x (per tensor) and w (per channel)"});
    }
  }
  return rows;
}

std::vector<GemmRow> bench_run_openblas(const std::string& device_class, int reps, bool quick) {
  openblas_set_num_threads(1);
  std::vector<GemmRow> rows;
  for (const LayerShape& l : bench_layers(quick))
    for (const OpCase& oc : op_cases(l)) {
      const bool a_t = oc.ta == Transpose::YES, b_t = oc.tb == Transpose::YES;
      const auto a = random_floats(size_t(oc.m * oc.k), 1), b = random_floats(size_t(oc.k * oc.n), 2);
      std::vector<float> c(size_t(oc.m * oc.n));
      const double s = median_seconds(reps, [&] {
        cblas_sgemm(CblasRowMajor, a_t ? CblasTrans : CblasNoTrans, b_t ? CblasTrans : CblasNoTrans, int(oc.m),
                    int(oc.n), int(oc.k), 1.0f, a.data(), int(a_t ? oc.m : oc.k), b.data(), int(b_t ? oc.k : oc.n),
                    0.0f, c.data(), int(oc.n));
      });
      rows.push_back({device_class, "fp32", oc.name, l.name, oc.m, oc.n, oc.k, s,
                      gemm_flops(oc.m, oc.n, oc.k) / s * 1e-9, "native", std::string("OpenBLAS ") + openblas_get_corename(),
                      "openblas"});
    }
  return rows;
}

}  // namespace qsync::bench
