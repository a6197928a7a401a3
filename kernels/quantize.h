// File: kernels/quantize.h
// Symmetric INT8 quantization (per tensor and per output channel, scale = amax / 127),
// round-to-nearest-even or seeded stochastic rounding, saturation to [-127, 127], and the
// amax reduction. Each entry point has a plain `_ref` twin (the test oracle); the unsuffixed
// versions are vectorized and bit-identical to the reference.
//
//   float s = int8_scale_from_amax(amax(x, n));
//   quantize_int8(x, q, n, s, Rounding::NEAREST_EVEN, 0);
#pragma once

#include <cstdint>

namespace qsync {

enum class Rounding : uint8_t {
  NEAREST_EVEN,
  STOCHASTIC,  // floor(x / s + u), u ~ U[0,1) from a counter-based hash of (seed, index)
};

// Largest |x| (NaN-ignoring). Returns 0 for n == 0.
float amax_ref(const float* x, int64_t n);
float amax(const float* x, int64_t n);

// Per-row amax of a (rows, cols) row-major matrix: out[r] = max_c |x[r, c]|.
void amax_rows_ref(const float* x, int64_t rows, int64_t cols, float* out);
void amax_rows(const float* x, int64_t rows, int64_t cols, float* out);

// amax / 127, or 1 when amax is 0 (an all-zero tensor quantizes to zeros, dequantizes exactly).
float int8_scale_from_amax(float amax);
// amax / qmax for a reduced range (e.g. 63: 7-bit activations on CPUs without VNNI), 1 when amax is 0.
inline float int8_scale_from_amax(float amax, int qmax) { return amax > 0.0f ? amax / float(qmax) : 1.0f; }

// The stochastic-rounding noise: a uniform in [0, 1) from (seed, index). Shared by CPU and CUDA.
float stochastic_uniform(uint64_t seed, uint64_t index);

// q[i] = clamp(round(x[i] / scale), -127, 127).
void quantize_int8_ref(const float* x, int8_t* q, int64_t n, float scale, Rounding r, uint64_t seed);
void quantize_int8(const float* x, int8_t* q, int64_t n, float scale, Rounding r, uint64_t seed);

// The same of x masked by a ReLU's mask (uint8 0/1): of mask[i] ? x[i] : +0, the gradient a
// ReLU's backward would write (a convolution with its ReLU fused reads the ReLU's output gradient
// and mask once instead of the ReLU writing a masked copy). Bit-identical to masking first.
float amax_masked_ref(const float* x, const uint8_t* mask, int64_t n);
float amax_masked(const float* x, const uint8_t* mask, int64_t n);
void quantize_int8_masked_ref(const float* x, const uint8_t* mask, int8_t* q, int64_t n, float scale, Rounding r,
                              uint64_t seed);
void quantize_int8_masked(const float* x, const uint8_t* mask, int8_t* q, int64_t n, float scale, Rounding r,
                          uint64_t seed);

// Per output channel: x is (rows, cols) row-major, row r uses scales[r].
void quantize_int8_rows_ref(const float* x, int8_t* q, int64_t rows, int64_t cols,
                            const float* scales, Rounding r, uint64_t seed);
void quantize_int8_rows(const float* x, int8_t* q, int64_t rows, int64_t cols,
                        const float* scales, Rounding r, uint64_t seed);

// x[i] = q[i] * scale.
void dequantize_int8_ref(const int8_t* q, float* x, int64_t n, float scale);
void dequantize_int8(const int8_t* q, float* x, int64_t n, float scale);

// y[i] = the BF16 bits of q[i] * scale: dequantize_int8 then fp32_to_bf16 (float_convert.h), in
// one pass (the 16-bit backward operand of an INT8 layer, written without an FP32 copy).
void dequantize_int8_to_bf16_ref(const int8_t* q, uint16_t* y, int64_t n, float scale);
void dequantize_int8_to_bf16(const int8_t* q, uint16_t* y, int64_t n, float scale);

// Per-tensor FP8 scale: maps amax onto the format's max finite value (2^-margin headroom).
float fp8_scale_from_amax(float amax, float format_max_finite);

}  // namespace qsync
