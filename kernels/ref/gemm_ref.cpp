// File: kernels/ref/gemm_ref.cpp
// Reference GEMM: decode both operands to FP32 (exact for every format), accumulate in double,
// apply the operand scales, add beta * C. Plain loops, no blocking, no threads.
#include "kernels/ref/gemm_ref.h"

#include <vector>

namespace qsync {
namespace {

double operand_scale(const GemmOperand& o, int64_t channel) {
  switch (o.scale_mode) {
    case ScaleMode::NONE: return 1.0;
    case ScaleMode::PER_TENSOR: return o.scales[0];
    case ScaleMode::PER_CHANNEL: return o.scales[channel];
  }
  return 1.0;
}

class GemmBackendRef final : public GemmBackend {
 public:
  const char* name() const override { return "ref"; }
  GemmSupport supports(const GemmSignature& s) const override {
    if (s.m <= 0 || s.n <= 0 || s.k <= 0) return {SupportLevel::UNSUPPORTED, "sizes must be positive"};
    return {SupportLevel::NATIVE, "scalar loops, double accumulation"};
  }
  void gemm(const GemmDesc& d) const override { gemm_ref(d); }
};

}  // namespace

void gemm_ref(const GemmDesc& in) {
  const GemmDesc d = gemm_resolve(in);
  const int64_t m = d.m, n = d.n, k = d.k;
  // Stored shapes: A is (m, k) or (k, m); B is (k, n) or (n, k).
  const bool ta = d.a.trans == Transpose::YES, tb = d.b.trans == Transpose::YES;
  std::vector<float> a(size_t(m * k)), b(size_t(k * n));  // stored layout, packed
  gemm_operand_to_fp32(d.a, ta ? k : m, ta ? m : k, a.data());
  gemm_operand_to_fp32(d.b, tb ? n : k, tb ? k : n, b.data());
  for (int64_t i = 0; i < m; ++i) {
    const double sa = operand_scale(d.a, i);
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0.0;
      for (int64_t p = 0; p < k; ++p) {
        const double av = ta ? a[size_t(p * m + i)] : a[size_t(i * k + p)];  // opA[i, p]
        const double bv = tb ? b[size_t(j * k + p)] : b[size_t(p * n + j)];  // opB[p, j]
        acc += av * bv;
      }
      float* c = d.c + i * d.ldc + j;
      const double prev = d.beta == 0.0f ? 0.0 : double(d.beta) * double(*c);  // beta = 0 ignores NaN in C
      *c = float(sa * operand_scale(d.b, j) * acc + prev);
    }
  }
  gemm_add_bias_rows(d);
}

const GemmBackend* gemm_backend_ref() {
  static const GemmBackendRef backend;
  return &backend;
}

}  // namespace qsync
