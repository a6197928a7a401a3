// File: kernels/cuda/quantize_cuda.h
// CUDA twins of kernels/quantize.h and kernels/float_convert.h, bit-identical to the CPU `_ref`
// functions, plus the dequant epilogue of the cuda GEMM backend. A plain C++ header: no CUDA
// includes; `stream` is a cudaStream_t passed as void* (nullptr: the legacy default stream).
//
// Every pointer is a device pointer, scales included (one float for per-tensor, `rows` floats
// for per-row), so a whole amax -> scale -> quantize chain runs without a host round trip.
// The calls only enqueue work on `stream`; synchronize before reading results on the host.
//
//   amax_cuda(x, n, d_amax, s);
//   int8_scale_from_amax_cuda(d_amax, d_scale, 1, s);
//   quantize_int8_cuda(x, q, n, d_scale, Rounding::NEAREST_EVEN, 0, s);
#pragma once

#include <cstdint>

#include "kernels/gemm.h"
#include "kernels/quantize.h"

namespace qsync {

// out[0] = max |x[i]| over x (n), NaN-ignoring; 0 for n == 0.
void amax_cuda(const float* x, int64_t n, float* out, void* stream);
// x (rows, cols) row-major; out[r] = max_c |x[r, c]| (rows values).
void amax_rows_cuda(const float* x, int64_t rows, int64_t cols, float* out, void* stream);
// scale[i] = int8_scale_from_amax(amax[i]) for i < count.
void int8_scale_from_amax_cuda(const float* amax, float* scale, int64_t count, void* stream);

// q[i] = clamp(round(x[i] / scale[0]), -127, 127), NaN -> 0; STOCHASTIC uses
// stochastic_uniform(seed, i), the same noise as the CPU.
void quantize_int8_cuda(const float* x, int8_t* q, int64_t n, const float* scale, Rounding r,
                        uint64_t seed, void* stream);
// x, q (rows, cols) row-major; row r uses scales[r]; noise index is r * cols + c.
void quantize_int8_rows_cuda(const float* x, int8_t* q, int64_t rows, int64_t cols,
                             const float* scales, Rounding r, uint64_t seed, void* stream);
// x[i] = q[i] * scale[0].
void dequantize_int8_cuda(const int8_t* q, float* x, int64_t n, const float* scale, void* stream);

// Buffer conversions, round-to-nearest-even with the saturation of float_convert.h.
void convert_fp32_to_fp16_cuda(const float* x, uint16_t* y, int64_t n, void* stream);
void convert_fp16_to_fp32_cuda(const uint16_t* x, float* y, int64_t n, void* stream);
void convert_fp32_to_bf16_cuda(const float* x, uint16_t* y, int64_t n, void* stream);
void convert_bf16_to_fp32_cuda(const uint16_t* x, float* y, int64_t n, void* stream);
// FP8 with a scale (device pointer, one float): y = fp8(x * inv_scale[0]); back: x = fp8 * scale[0].
void convert_fp32_to_e4m3_cuda(const float* x, uint8_t* y, int64_t n, const float* inv_scale, void* stream);
void convert_e4m3_to_fp32_cuda(const uint8_t* x, float* y, int64_t n, const float* scale, void* stream);
void convert_fp32_to_e5m2_cuda(const float* x, uint8_t* y, int64_t n, const float* inv_scale, void* stream);
void convert_e5m2_to_fp32_cuda(const uint8_t* x, float* y, int64_t n, const float* scale, void* stream);

// scale[i] = amax[i] == 0 ? 1 : amax[i] / divisor (int8: qmax; fp8: the format's max finite), and
// inv_scale[i] = 1 / scale[i] when inv_scale is not null: int8_scale_from_amax(amax, qmax) and
// fp8_scale_from_amax of kernels/quantize.h, bit for bit.
void scales_from_amax_cuda(const float* amax, float* scale, float* inv_scale, int64_t count, float divisor,
                           void* stream);

// x (rows, cols) -> q (rows, cols), and q_t (cols, rows) with the same values when q_t is not
// null (one read of x, both layouts written coalesced through shared-memory tiles): INT8 with the
// per-tensor scale[0], noise index r * cols + c (as quantize_int8_cuda).
void quantize_int8_2d_cuda(const float* x, int8_t* q, int8_t* q_t, int64_t rows, int64_t cols, const float* scale,
                           Rounding r, uint64_t seed, void* stream);
// FP8 likewise: y = fp8(x * inv_scale[0]) in E4M3 (e4m3) or E5M2.
void quantize_fp8_2d_cuda(const float* x, uint8_t* y, uint8_t* y_t, int64_t rows, int64_t cols, const float* inv_scale,
                          bool e4m3, void* stream);

// The 16-bit formats of the backward of int8 layers.
enum class SixteenBit : uint8_t { NONE, BF16, FP16 };
// out (rows, cols) = q * scale (per tensor: scales[0]; per row: scales[r]) as FP32, then rounded to
// the 16-bit format round_to and back (NONE: not rounded).
void dequantize_int8_to_fp32_cuda(const int8_t* q, float* out, int64_t rows, int64_t cols, const float* scales,
                                  bool per_row, SixteenBit round_to, void* stream);
// The same values stored in the 16-bit format (BF16 or FP16).
void dequantize_int8_to_sixteen_cuda(const int8_t* q, uint16_t* out, int64_t rows, int64_t cols, const float* scales,
                                     bool per_row, SixteenBit format, void* stream);
// x rounded to BF16 / FP16 and back, in place.
void round_to_sixteen_bit_cuda(float* x, int64_t n, SixteenBit format, void* stream);

// Host twins of the per-element device code: the same __host__ __device__ functions, called on
// the host (where the cuda_fp16 / cuda_bf16 / cuda_fp8 intrinsics take their software paths).
// Tests without a GPU check them against the CPU `_ref` functions bit for bit.
float stochastic_uniform_cuda_twin(uint64_t seed, uint64_t index);
uint16_t fp32_to_fp16_cuda_twin(float x);
float fp16_to_fp32_cuda_twin(uint16_t h);
uint16_t fp32_to_bf16_cuda_twin(float x);
float bf16_to_fp32_cuda_twin(uint16_t b);
uint8_t fp32_to_e4m3_cuda_twin(float x);
float e4m3_to_fp32_cuda_twin(uint8_t v);
uint8_t fp32_to_e5m2_cuda_twin(float x);
float e5m2_to_fp32_cuda_twin(uint8_t v);

// The GEMM dequant epilogue. acc (m, n) row-major with row stride ld_acc (int32 from IMMA, or
// float from an unscaled FP8 GEMM); c (m, n) row-major with row stride ldc:
//   c[i, j] = (acc[i, j] * sa(i) * sb(j) [+ bias[j]]) + beta * c[i, j]   (beta == 0: c is not read)
// sa is `sa[0]` (PER_TENSOR) or `sa[i]` (PER_CHANNEL), sb likewise per column j; NONE means 1.
struct EpilogueScales {
  const float* sa = nullptr;
  ScaleMode sa_mode = ScaleMode::NONE;
  const float* sb = nullptr;
  ScaleMode sb_mode = ScaleMode::NONE;
  const float* bias = nullptr;  // (n), or nullptr
};
void gemm_dequant_epilogue_cuda(const int32_t* acc, int64_t ld_acc, float* c, int64_t ldc, int64_t m,
                                int64_t n, const EpilogueScales& scales, float beta, void* stream);
void gemm_dequant_epilogue_cuda(const float* acc, int64_t ld_acc, float* c, int64_t ldc, int64_t m,
                                int64_t n, const EpilogueScales& scales, float beta, void* stream);

}  // namespace qsync
