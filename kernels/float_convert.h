// File: kernels/float_convert.h
// Scalar conversions between FP32 and the narrow float formats (the _ref oracles), plus the
// vectorized buffer converters that the worker uses (AVX-512 / AVX2 / scalar by runtime dispatch).
//
// Rounding is round-to-nearest-even. Narrowing saturates: a finite value past the format's
// largest finite value becomes +-max_finite; +-inf stays inf where the format has one
// (FP16, BF16, E5M2) and saturates where it has none (E4M3); NaN stays NaN.
#pragma once

#include <cstdint>

namespace qsync {

uint16_t fp32_to_fp16_ref(float x);
float fp16_to_fp32_ref(uint16_t h);
uint16_t fp32_to_bf16_ref(float x);
float bf16_to_fp32_ref(uint16_t b);
uint8_t fp32_to_e4m3_ref(float x);
float e4m3_to_fp32_ref(uint8_t v);
uint8_t fp32_to_e5m2_ref(float x);
float e5m2_to_fp32_ref(uint8_t v);
float fp32_round_to_tf32_ref(float x);  // keeps 10 mantissa bits, RNE

// Buffer converters: vectorized on the CPU (bit-identical to the _ref functions).
void convert_fp32_to_fp16(const float* x, uint16_t* y, int64_t n);
void convert_fp16_to_fp32(const uint16_t* x, float* y, int64_t n);
void convert_fp32_to_bf16(const float* x, uint16_t* y, int64_t n);
void convert_bf16_to_fp32(const uint16_t* x, float* y, int64_t n);
// FP8 with a scale: y = fp8(x * inv_scale); back: x = fp8 * scale.
void convert_fp32_to_e4m3(const float* x, uint8_t* y, int64_t n, float inv_scale);
void convert_e4m3_to_fp32(const uint8_t* x, float* y, int64_t n, float scale);
void convert_fp32_to_e5m2(const float* x, uint8_t* y, int64_t n, float inv_scale);
void convert_e5m2_to_fp32(const uint8_t* x, float* y, int64_t n, float scale);

}  // namespace qsync
