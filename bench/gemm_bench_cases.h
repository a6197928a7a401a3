// File: bench/gemm_bench_cases.h
// The GEMM benchmark's measurements, run inside one process that runs as one device class:
// training-shaped GEMMs (forward, input gradient, weight gradient) in every precision, the
// OpenBLAS sgemm peer, and the INT8 quantize/dequantize overhead.
#pragma once

#include <string>
#include <vector>

namespace qsync::bench {

struct GemmRow {
  std::string device_class;  // "cpu-avx2", ...
  std::string precision;     // "fp32", "int8", ...
  std::string op;            // "forward", "input_grad", "weight_grad", "quantize"
  std::string layer;         // "square", "mlp", "wide", "conv", "gpt-fc1", "gpt-fc2"
  long m = 0, n = 0, k = 0;
  double median_seconds = 0;
  double gflops = 0;         // GFLOP/s (GOP/s for int8); for "quantize": 0
  std::string support;       // native / emulated
  std::string impl;          // the kernel used
  std::string library = "qsync";  // "qsync" or "openblas" (the FP32 peer, run at the class's ISA)
};

struct LayerShape {
  std::string name;
  long batch, in, out;  // a Linear (or conv-as-GEMM) layer: x (batch, in), w (out, in)
};
const std::vector<LayerShape>& bench_layers(bool quick);

// Runs every precision x op x layer with `reps` timed repetitions (median) under the active class.
std::vector<GemmRow> bench_run_class(const std::string& device_class, int reps, bool quick);
// OpenBLAS sgemm on the same shapes, single threaded: the FP32 peer of `device_class`.
std::vector<GemmRow> bench_run_openblas(const std::string& device_class, int reps, bool quick);

}  // namespace qsync::bench
