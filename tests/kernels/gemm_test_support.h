// File: tests/kernels/gemm_test_support.h
// Shared fixtures for GEMM tests on every backend: random operands in any precision (with their
// scales), the normalized-MSE metric, and the shape/transpose sweeps.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/gemm.h"
#include "kernels/precision.h"
#include "kernels/quantize.h"

namespace qsync::testing {

// A matrix stored in some precision, owning its bytes and scales.
struct TestOperand {
  std::vector<uint8_t> bytes;
  std::vector<float> scales;
  GemmOperand op;
};

// Fills a stored (rows, cols) matrix with row stride ld from N(0, 1) values, encodes it in `p`.
// INT8: quantized with scale amax/127 (per tensor, or per channel along rows or columns);
// quant_max > 0 quantizes to [-quant_max, quant_max] instead (7-bit "reduce_range": 63).
inline TestOperand make_operand(Precision p, Transpose t, int64_t rows, int64_t cols, int64_t ld,
                                ScaleMode mode, std::mt19937& rng, bool per_channel_along_rows,
                                bool int8_unsigned = false, float quant_max = 0.0f) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const PrecisionTraits& tr = precision_traits(p);
  std::vector<float> values(size_t(rows * ld), 0.0f);
  for (auto& v : values) v = int8_unsigned ? std::fabs(dist(rng)) : dist(rng);
  TestOperand o;
  o.bytes.assign(values.size() * size_t(tr.bytes), 0);
  const bool scaled = p == Precision::INT8 || p == Precision::FP8_E4M3 || p == Precision::FP8_E5M2;
  const int64_t channels = per_channel_along_rows ? rows : cols;
  if (scaled) {
    const int64_t n_scales = mode == ScaleMode::PER_CHANNEL ? channels : 1;
    o.scales.assign(size_t(n_scales), 0.0f);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t s = mode == ScaleMode::PER_CHANNEL ? (per_channel_along_rows ? r : c) : 0;
        o.scales[size_t(s)] = std::max(o.scales[size_t(s)], std::fabs(values[size_t(r * ld + c)]));
      }
    const float top = quant_max > 0 ? quant_max : int8_unsigned ? 255.0f : tr.max_finite;
    for (auto& s : o.scales) s = s == 0.0f ? 1.0f : s / top;
  }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < ld; ++c) {
      const size_t i = size_t(r * ld + c);
      float v = values[i];
      if (scaled) {
        const int64_t s = mode == ScaleMode::PER_CHANNEL ? (per_channel_along_rows ? r : c) : 0;
        v = c < cols ? v / o.scales[size_t(s)] : 0.0f;
      }
      uint32_t bits;
      if (int8_unsigned) {
        float q = std::nearbyint(v);
        bits = uint32_t(q < 0 ? 0 : (q > 255 ? 255 : q));
      } else {
        bits = tr.encode(v);
      }
      std::memcpy(&o.bytes[i * size_t(tr.bytes)], &bits, size_t(tr.bytes));
    }
  o.op.data = o.bytes.data();
  o.op.precision = p;
  o.op.trans = t;
  o.op.ld = ld;
  o.op.scale_mode = scaled ? mode : ScaleMode::NONE;
  o.op.scales = scaled ? o.scales.data() : nullptr;
  o.op.int8_unsigned = int8_unsigned;
  return o;
}

// sum (x - y)^2 / sum y^2 over the (m, n) block with row stride ld.
inline double nmse(const float* x, const float* y, int64_t m, int64_t n, int64_t ld) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const double a = x[i * ld + j], b = y[i * ld + j];
      num += (a - b) * (a - b);
      den += b * b;
    }
  return den == 0 ? num : num / den;
}

struct Shape {
  int64_t m, n, k;
};

// The descriptor of C (m, n; row stride ldc) = op(a) op(b) + beta C, plus `bias` where not null;
// the caller sets d.c.
inline GemmDesc gemm_desc(const Shape& s, const TestOperand& a, const TestOperand& b, int64_t ldc, float beta,
                          const float* bias) {
  GemmDesc d;
  d.m = s.m, d.n = s.n, d.k = s.k;
  d.a = a.op, d.b = b.op;
  d.ldc = ldc;
  d.beta = beta;
  d.bias = bias;
  return d;
}

// 1, odd sizes, sizes just past tile multiples (16, 32, 64), tall and skinny, K longer than tiles.
inline const std::vector<Shape>& awkward_shapes() {
  static const std::vector<Shape> shapes = {
      {1, 1, 1},    {1, 17, 3},   {7, 5, 13},  {33, 65, 17}, {64, 64, 64}, {65, 129, 33},
      {17, 31, 257}, {300, 3, 7}, {3, 300, 9}, {2, 9, 513},  {128, 96, 80},
  };
  return shapes;
}

inline std::string transpose_case_name(Transpose a, Transpose b) {
  if (a == Transpose::NO && b == Transpose::YES) return "forward_NT";
  if (a == Transpose::NO && b == Transpose::NO) return "input_grad_NN";
  if (a == Transpose::YES && b == Transpose::NO) return "weight_grad_TN";
  return "TT";
}

}  // namespace qsync::testing
