// File: worker/layers/parameter_init.h
// Parameter allocation and the initializers layers share. The normal draws use Box-Muller on
// the raw 64-bit outputs of std::mt19937_64 (whose sequence the standard fixes), so an
// initialization is the same with every standard library, unlike std::normal_distribution.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <string>

#include "worker/layer.h"

namespace qsync {

// value and grad, FP32, zero-filled, charged to `memory` ("<name>", "<name>.grad").
inline Parameter parameter_allocate(const std::string& name, const Shape& shape, bool decay, MemoryAccount* memory) {
  Parameter p;
  p.name = name;
  p.value = Tensor::zeros(shape, Precision::FP32, memory, name);
  p.grad = Tensor::zeros(shape, Precision::FP32, memory, name + ".grad");
  p.decay = decay;
  return p;
}

// A uniform double in (0, 1): 53 bits, never 0.
inline double uniform_open01(std::mt19937_64& rng) { return (double(rng() >> 11) + 0.5) * 0x1.0p-53; }

// N(0, stddev^2), pairs of draws by Box-Muller.
inline void init_normal(Tensor& t, float stddev, std::mt19937_64& rng) {
  constexpr double TWO_PI = 6.28318530717958647692;
  float* p = t.f32();
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; i += 2) {
    const double r = std::sqrt(-2.0 * std::log(uniform_open01(rng)));
    const double a = TWO_PI * uniform_open01(rng);
    p[i] = float(stddev * r * std::cos(a));
    if (i + 1 < n) p[i + 1] = float(stddev * r * std::sin(a));
  }
}

// U(-bound, bound).
inline void init_uniform(Tensor& t, float bound, std::mt19937_64& rng) {
  float* p = t.f32();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = float((2.0 * uniform_open01(rng) - 1.0) * bound);
}

}  // namespace qsync
