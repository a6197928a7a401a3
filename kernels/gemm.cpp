// File: kernels/gemm.cpp
// What every GEMM backend checks before it computes: gemm_validate, plus small shared helpers.
#include "kernels/gemm.h"

#include <string>

namespace qsync {
namespace {

bool is_scaled(Precision p) {
  return p == Precision::INT8 || p == Precision::FP8_E4M3 || p == Precision::FP8_E5M2;
}
bool is_fp8(Precision p) { return p == Precision::FP8_E4M3 || p == Precision::FP8_E5M2; }

[[noreturn]] void fail(const std::string& what) { throw GemmError("gemm: " + what); }

void check_operand(const char* which, const GemmOperand& o, int64_t rows, int64_t cols,
                   int64_t channels) {
  const std::string w = which;
  if (o.data == nullptr) fail("operand " + w + " has no data pointer");
  // Stored shape: (rows, cols) when not transposed, (cols, rows) when transposed.
  const int64_t min_ld = o.trans == Transpose::NO ? cols : rows;
  if (o.ld < min_ld)
    fail("leading dimension of " + w + " is " + std::to_string(o.ld) + " but must be at least " +
         std::to_string(min_ld) + " for its " + (o.trans == Transpose::NO ? "(rows, cols)" : "transposed") +
         " layout; pass ld = 0 for a packed matrix");
  if (is_scaled(o.precision)) {
    if (o.scale_mode == ScaleMode::NONE || o.scales == nullptr)
      fail(std::string(precision_name(o.precision)) + " operand " + w +
           " needs scales (set scale_mode and scales; scale = amax / max_finite)");
    if (o.scale_mode == ScaleMode::PER_CHANNEL && channels <= 0)
      fail("per-channel scales of " + w + " need a positive channel count");
  } else if (o.scale_mode != ScaleMode::NONE) {
    fail(std::string("scales apply to int8/fp8 operands only; operand ") + w + " is " +
         precision_name(o.precision) + ": set scale_mode = NONE");
  }
  if (o.int8_unsigned && o.precision != Precision::INT8)
    fail("operand " + w + " is marked int8_unsigned but its precision is " + precision_name(o.precision));
}

}  // namespace

const char* support_level_name(SupportLevel s) {
  switch (s) {
    case SupportLevel::NATIVE: return "native";
    case SupportLevel::EMULATED: return "emulated";
    case SupportLevel::UNSUPPORTED: return "unsupported";
  }
  return "?";
}

GemmDesc gemm_resolve(const GemmDesc& in) {
  GemmDesc d = in;
  if (d.m <= 0 || d.n <= 0 || d.k <= 0)
    fail("sizes must be positive, got m=" + std::to_string(d.m) + " n=" + std::to_string(d.n) +
         " k=" + std::to_string(d.k));
  if (d.a.ld == 0) d.a.ld = d.a.trans == Transpose::NO ? d.k : d.m;
  if (d.b.ld == 0) d.b.ld = d.b.trans == Transpose::NO ? d.n : d.k;
  if (d.ldc == 0) d.ldc = d.n;
  const Precision pa = d.a.precision, pb = d.b.precision;
  const bool pair_ok = pa == pb || (is_fp8(pa) && is_fp8(pb));
  if (!pair_ok)
    fail(std::string("operand precisions must match (or both be fp8), got a=") + precision_name(pa) +
         " b=" + precision_name(pb) + "; convert one operand first");
  check_operand("a", d.a, d.m, d.k, d.m);
  check_operand("b", d.b, d.k, d.n, d.n);
  if (d.b.int8_unsigned) fail("operand b cannot be unsigned int8 (weights are signed); only a may be u8");
  if (d.c == nullptr) fail("output c has no pointer");
  if (d.ldc < d.n) fail("ldc is " + std::to_string(d.ldc) + " but must be at least n = " + std::to_string(d.n));
  return d;
}

void gemm_validate(const GemmDesc& d) { (void)gemm_resolve(d); }

void gemm_add_bias_rows(const GemmDesc& d) {
  if (d.bias == nullptr) return;
  const int64_t ldc = d.ldc == 0 ? d.n : d.ldc;
  const float* __restrict bias = d.bias;
#pragma omp parallel for if (d.m * d.n > (1 << 16))
  for (int64_t i = 0; i < d.m; ++i) {
    float* __restrict row = d.c + i * ldc;
    for (int64_t j = 0; j < d.n; ++j) row[j] += bias[j];
  }
}

GemmSignature gemm_signature(const GemmDesc& d) {
  GemmSignature s;
  s.a_precision = d.a.precision;
  s.b_precision = d.b.precision;
  s.m = d.m;
  s.n = d.n;
  s.k = d.k;
  s.a_trans = d.a.trans;
  s.b_trans = d.b.trans;
  s.lda = d.a.ld;
  s.ldb = d.b.ld;
  s.ldc = d.ldc;
  s.a_int8_unsigned = d.a.int8_unsigned;
  return s;
}

}  // namespace qsync

#include "kernels/float_convert.h"

namespace qsync {

void gemm_operand_to_fp32(const GemmOperand& o, int64_t rows, int64_t cols, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    float* dst = out + r * cols;
    const int64_t off = r * o.ld;
    switch (o.precision) {
      case Precision::FP32: {
        const float* src = static_cast<const float*>(o.data) + off;
        for (int64_t c = 0; c < cols; ++c) dst[c] = src[c];
        break;
      }
      case Precision::TF32: {
        const float* src = static_cast<const float*>(o.data) + off;
        for (int64_t c = 0; c < cols; ++c) dst[c] = fp32_round_to_tf32_ref(src[c]);
        break;
      }
      case Precision::BF16:
        convert_bf16_to_fp32(static_cast<const uint16_t*>(o.data) + off, dst, cols);
        break;
      case Precision::FP16:
        convert_fp16_to_fp32(static_cast<const uint16_t*>(o.data) + off, dst, cols);
        break;
      case Precision::INT8:
        if (o.int8_unsigned) {
          const uint8_t* src = static_cast<const uint8_t*>(o.data) + off;
          for (int64_t c = 0; c < cols; ++c) dst[c] = float(src[c]);
        } else {
          const int8_t* src = static_cast<const int8_t*>(o.data) + off;
          for (int64_t c = 0; c < cols; ++c) dst[c] = float(src[c]);
        }
        break;
      case Precision::FP8_E4M3:
        convert_e4m3_to_fp32(static_cast<const uint8_t*>(o.data) + off, dst, cols, 1.0f);
        break;
      case Precision::FP8_E5M2:
        convert_e5m2_to_fp32(static_cast<const uint8_t*>(o.data) + off, dst, cols, 1.0f);
        break;
    }
  }
}

}  // namespace qsync
