// File: bench/onnx_load_bench.cpp
// qsync-bench-onnx-load MODEL.onnx [repeats]: the seconds to load an ONNX model (read + decode +
// map to a description: model_desc_find) and to build the engine's model from it (layers,
// initial weights from the initializers, the flat parameter buffers), medians over `repeats`
// (default 5) interleaved rounds. Not a test: the target (< 2 s for 100 MB of weights) is in
// docs/onnx.md with the numbers of this machine.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "planner/model_desc.h"
#include "worker/model.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: qsync-bench-onnx-load MODEL.onnx [repeats]\n");
    return 2;
  }
  const int repeats = argc > 2 ? std::max(1, std::atoi(argv[2])) : 5;
  using clock = std::chrono::steady_clock;
  std::vector<double> load, build;
  int64_t params = 0;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = clock::now();
    const qsync::ModelDesc desc = qsync::model_desc_find(argv[1]);
    const auto t1 = clock::now();
    qsync::Model model(desc, nullptr, 1);
    const auto t2 = clock::now();
    params = model.parameter_count();
    load.push_back(std::chrono::duration<double>(t1 - t0).count());
    build.push_back(std::chrono::duration<double>(t2 - t1).count());
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::printf("%s: %lld parameters (%.1f MB FP32); load %.3f s, build %.3f s, total %.3f s (medians of %d)\n", argv[1],
              static_cast<long long>(params), double(params) * 4 / 1e6, median(load), median(build),
              median(load) + median(build), repeats);
  return 0;
}
